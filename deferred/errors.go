package deferred

import (
	"encoding/json"
	"fmt"
)

// Deferral is the control-flow error a tool body or args validator returns to
// defer its call (D2): Kind says whether it waits for an approval or for an
// external result, Metadata travels with the batch entry (D8).
type Deferral struct {
	Kind     Kind
	Metadata json.RawMessage // nil: no metadata key in the batch
}

// Kind is the category of a deferred call.
type Kind string

const (
	KindApproval Kind = "approval"
	KindCall     Kind = "call"
)

func (d *Deferral) Error() string {
	if d.Kind == KindApproval {
		return "approval required"
	}
	return "call deferred"
}

// ApprovalRequired defers the call until it is approved. meta may be nil; any
// other value is marshalled to JSON (a value that cannot be is a programmer
// error and panics).
func ApprovalRequired(meta any) error { return &Deferral{Kind: KindApproval, Metadata: mustJSON(meta)} }

// CallDeferred defers the call to an external executor.
func CallDeferred(meta any) error { return &Deferral{Kind: KindCall, Metadata: mustJSON(meta)} }

func mustJSON(v any) json.RawMessage {
	switch v := v.(type) {
	case nil:
		return nil
	case json.RawMessage:
		return v
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("deferred: metadata is not JSON: %v", err))
	}
	return b
}

// CategoryError is an answer in the wrong category (D16, D20): a decision for
// an external call, or a result for an approval call. Kind is the category the
// call belongs to.
type CategoryError struct {
	ToolCallID string
	Kind       Kind
}

func (e *CategoryError) Error() string {
	if e.Kind == KindCall {
		return fmt.Sprintf("tool_call_id %q is an external call; it needs a result, not a decision", e.ToolCallID)
	}
	return fmt.Sprintf("tool_call_id %q is an approval call; it needs a decision, not a result", e.ToolCallID)
}

// InvalidAnswerError is an answer that is not a valid Decision or Result: a
// nil one, a pointer form, or a JSON value that is not a decision (D20).
type InvalidAnswerError struct {
	ToolCallID string
	Kind       Kind // the category the answer was given in
	Reason     string
}

func (e *InvalidAnswerError) Error() string {
	what := "result"
	if e.Kind == KindApproval {
		what = "approval"
	}
	return fmt.Sprintf("%s for tool_call_id %q: %s", what, e.ToolCallID, e.Reason)
}

// NotPendingError is an answer for an id the batch does not hold (D16, D32).
type NotPendingError struct {
	ToolCallID string
}

func (e *NotPendingError) Error() string {
	return fmt.Sprintf("tool_call_id %q is not pending", e.ToolCallID)
}

// MissingResultsError says the results do not answer exactly the pending calls
// (D19): Expected holds the batch's ids, Got the answered ones, both sorted.
type MissingResultsError struct {
	Expected []string
	Got      []string
}

func (e *MissingResultsError) Error() string {
	return fmt.Sprintf("results needed for all deferred calls: expected %v, got %v", e.Expected, e.Got)
}
