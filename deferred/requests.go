package deferred

import (
	"encoding/json"
	"fmt"
	"slices"
)

// kinds maps every id of the batch to its category. A nil batch is empty.
func (r *Requests) kinds() map[string]Kind {
	if r == nil {
		return map[string]Kind{}
	}
	k := make(map[string]Kind, len(r.Calls)+len(r.Approvals))
	for _, c := range r.Calls {
		k[c.ToolCallID] = KindCall
	}
	for _, c := range r.Approvals {
		k[c.ToolCallID] = KindApproval
	}
	return k
}

// BuildResults assembles answers for this batch (D32). Every id must belong
// to the matching list: an id of the other category is a *CategoryError, an
// id outside the batch (metadata included) a *NotPendingError, a nil or
// pointer answer an *InvalidAnswerError. With approveAll, every approval call
// not answered explicitly is approved; an explicit Denied stays. The batch
// need not be answered completely; Check tells whether it is.
func (r *Requests) BuildResults(approvals map[string]Decision, calls map[string]Result, metadata map[string]json.RawMessage, approveAll bool) (*Results, error) {
	kinds := r.kinds()
	for _, id := range sortedKeys(approvals) {
		if err := inCategory(kinds, id, KindApproval); err != nil {
			return nil, err
		}
		if err := checkDecision(id, approvals[id]); err != nil {
			return nil, err
		}
	}
	for _, id := range sortedKeys(calls) {
		if err := inCategory(kinds, id, KindCall); err != nil {
			return nil, err
		}
		if err := checkResult(id, calls[id]); err != nil {
			return nil, err
		}
	}
	for _, id := range sortedKeys(metadata) {
		if _, ok := kinds[id]; !ok {
			return nil, &NotPendingError{ToolCallID: id}
		}
		if err := checkRaw(metadata[id]); err != nil {
			return nil, fmt.Errorf("metadata of tool_call_id %q: %w", id, err)
		}
	}
	res := &Results{
		Approvals: make(map[string]Decision, len(approvals)),
		Calls:     make(map[string]Result, len(calls)),
		Metadata:  make(map[string]json.RawMessage, len(metadata)),
	}
	for id, d := range approvals {
		res.Approvals[id] = d
	}
	if approveAll && r != nil {
		for _, c := range r.Approvals {
			if _, ok := res.Approvals[c.ToolCallID]; !ok {
				res.Approvals[c.ToolCallID] = Approved{}
			}
		}
	}
	for id, v := range calls {
		res.Calls[id] = v
	}
	for id, m := range metadata {
		res.Metadata[id] = m
	}
	return res, nil
}

func inCategory(kinds map[string]Kind, id string, want Kind) error {
	switch got, ok := kinds[id]; {
	case !ok:
		return &NotPendingError{ToolCallID: id}
	case got != want:
		return &CategoryError{ToolCallID: id, Kind: got}
	}
	return nil
}

// Remaining is what is still unanswered once res is applied (D33): an
// approval call counts as answered only by a decision, an external call only
// by a result. Metadata is kept for the remaining ids only. It returns nil
// when nothing is left. r is not modified.
func (r *Requests) Remaining(res *Results) *Requests {
	if r == nil {
		return nil
	}
	var answeredApprovals map[string]Decision
	var answeredCalls map[string]Result
	if res != nil {
		answeredApprovals, answeredCalls = res.Approvals, res.Calls
	}
	out := &Requests{}
	for _, c := range r.Calls {
		if answeredCalls[c.ToolCallID] == nil {
			out.Calls = append(out.Calls, c)
		}
	}
	for _, c := range r.Approvals {
		if answeredApprovals[c.ToolCallID] == nil {
			out.Approvals = append(out.Approvals, c)
		}
	}
	if len(out.Calls) == 0 && len(out.Approvals) == 0 {
		return nil
	}
	for _, list := range [][]Call{out.Calls, out.Approvals} {
		for _, c := range list {
			if m, ok := r.Metadata[c.ToolCallID]; ok {
				if out.Metadata == nil {
					out.Metadata = make(map[string]json.RawMessage)
				}
				out.Metadata[c.ToolCallID] = m
			}
		}
	}
	return out
}

// Check validates res against this batch before anything runs (D19's last
// two checks, D20), in this order: an answer in the wrong category
// (*CategoryError); a nil, pointer or malformed answer (*InvalidAnswerError);
// answers that do not cover exactly the batch's ids (*MissingResultsError);
// metadata for an id outside the batch (*NotPendingError). Within a check,
// ids are examined in sorted order so the error is deterministic.
func (r *Requests) Check(res *Results) error {
	if res == nil {
		res = &Results{}
	}
	kinds := r.kinds()
	approvals, calls := sortedKeys(res.Approvals), sortedKeys(res.Calls)
	for _, id := range approvals {
		if kinds[id] == KindCall {
			return &CategoryError{ToolCallID: id, Kind: KindCall}
		}
	}
	for _, id := range calls {
		if kinds[id] == KindApproval {
			return &CategoryError{ToolCallID: id, Kind: KindApproval}
		}
	}
	for _, id := range approvals {
		if err := checkDecision(id, res.Approvals[id]); err != nil {
			return err
		}
	}
	for _, id := range calls {
		if err := checkResult(id, res.Calls[id]); err != nil {
			return err
		}
	}
	expected := sortedKeys(kinds)
	got := slices.Compact(slices.Sorted(slices.Values(slices.Concat(approvals, calls))))
	if !slices.Equal(expected, got) {
		return &MissingResultsError{Expected: expected, Got: got}
	}
	for _, id := range sortedKeys(res.Metadata) {
		if _, ok := kinds[id]; !ok {
			return &NotPendingError{ToolCallID: id}
		}
		if err := checkRaw(res.Metadata[id]); err != nil {
			return fmt.Errorf("metadata of tool_call_id %q: %w", id, err)
		}
	}
	return nil
}

// checkDecision accepts Approved (override args absent or a JSON object) and
// Denied. Pointer forms are refused so that a type switch on the values is
// exhaustive everywhere.
func checkDecision(id string, d Decision) error {
	bad := func(reason string, args ...any) error {
		return &InvalidAnswerError{ToolCallID: id, Kind: KindApproval, Reason: fmt.Sprintf(reason, args...)}
	}
	switch d := d.(type) {
	case nil:
		return bad("decision is nil")
	case Approved:
		if isAbsent(d.OverrideArgs) {
			return nil
		}
		if !json.Valid(d.OverrideArgs) || !isObject(d.OverrideArgs) {
			return bad("override_args is not a JSON object")
		}
		return nil
	case Denied:
		return nil
	default:
		return bad("%T is not a decision; use deferred.Approved or deferred.Denied", d)
	}
}

// checkResult accepts Value, Return, Retry and Failed with valid JSON values.
func checkResult(id string, res Result) error {
	bad := func(reason string, args ...any) error {
		return &InvalidAnswerError{ToolCallID: id, Kind: KindCall, Reason: fmt.Sprintf(reason, args...)}
	}
	switch res := res.(type) {
	case nil:
		return bad("result is nil")
	case Value:
		if checkRaw(res.Value) != nil {
			return bad("value is not valid JSON")
		}
	case Return:
		if checkRaw(res.Value) != nil {
			return bad("return value is not valid JSON")
		}
		if checkRaw(res.Metadata) != nil {
			return bad("return metadata is not valid JSON")
		}
	case Retry, Failed:
	default:
		return bad("%T is not a result; use deferred.Value, Return, Retry or Failed", res)
	}
	return nil
}
