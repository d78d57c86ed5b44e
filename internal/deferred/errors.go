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
