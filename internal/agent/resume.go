package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/internal/deferred"
)

// resumeItems checks a resume before anything runs (D19, D20, D12) and turns
// the pending calls of the history's last response into items carrying their
// decisions and results, in emission order.
func (r *run) resumeItems() ([]*callItem, error) {
	unsettled, pos, err := unsettledCalls(r.in.History, r.in.Results)
	if err != nil {
		return nil, err
	}
	kinds, args, err := r.checkResults(unsettled, pos)
	if err != nil {
		return nil, err
	}
	items := make([]*callItem, len(unsettled))
	for i, c := range unsettled {
		it := &callItem{part: c, pos: pos[i], tool: r.byName[c.ToolName], args: args[i], kind: kinds[i], state: stPending}
		applyResults(it, r.in.Results)
		items[i] = it
	}
	return items, nil
}

// unsettledCalls are the calls of the history's last model response that
// no later message settled, each with its place among the response's
// calls. It refuses a history without one, duplicate ids in the response,
// and results given for calls that were already executed.
func unsettledCalls(hist []Message, res *deferred.Results) (unsettled []Part, pos []int, err error) {
	if len(hist) == 0 {
		return nil, nil, errors.New("resume: message history is empty")
	}
	last := lastResponse(hist)
	if last < 0 {
		return nil, nil, errors.New("resume: no model response in the message history")
	}
	var calls []Part
	for _, p := range hist[last].Parts {
		if p.Kind == PartToolCall {
			calls = append(calls, p)
		}
	}
	settled := settledIDs(hist[last+1:])
	for i, c := range calls {
		if !settled[c.ToolCallID] {
			unsettled = append(unsettled, c)
			pos = append(pos, i)
		}
	}
	if len(unsettled) == 0 {
		return nil, nil, errors.New("resume: no unsettled tool calls in the last model response")
	}
	seen := map[string]int{}
	var dups []string
	for _, c := range calls {
		if seen[c.ToolCallID]++; seen[c.ToolCallID] == 2 {
			dups = append(dups, c.ToolCallID)
		}
	}
	if len(dups) > 0 {
		return nil, nil, fmt.Errorf("resume: duplicate tool_call_id in the last model response: %s", strings.Join(dups, ", "))
	}
	var done []string
	for _, id := range resultIDs(res) {
		if settled[id] {
			done = append(done, id)
		}
	}
	if len(done) > 0 {
		return nil, nil, fmt.Errorf("resume: results given for tool calls that were already executed: %s", strings.Join(done, ", "))
	}
	return unsettled, pos, nil
}

// checkResults holds the results against the unsettled calls as a batch
// with their categories, so that the batch's own check refuses wrong
// categories, non-answers and missing results, in that order (D19, D20).
// It returns each call's category and the args it runs with.
func (r *run) checkResults(unsettled []Part, pos []int) ([]deferred.Kind, []json.RawMessage, error) {
	res := r.in.Results
	kinds := make([]deferred.Kind, len(unsettled))
	args := make([]json.RawMessage, len(unsettled))
	pending := &deferred.Requests{}
	var problems []string
	for i, c := range unsettled {
		id := c.ToolCallID
		kind, entry, err := r.category(c, pos[i])
		if err != nil {
			return nil, nil, fmt.Errorf("resume: %w", err)
		}
		kinds[i] = kind
		args[i] = c.Args
		if entry != nil && len(entry.Args) > 0 {
			// The paused batch holds the args the call runs with: an
			// override approved before it deferred again (D24, D26).
			args[i] = entry.Args
		}
		call := deferred.Call{ToolName: c.ToolName, Args: args[i], ToolCallID: id}
		_, hasDecision := res.Approvals[id]
		_, hasResult := res.Calls[id]
		switch {
		case kind == deferred.KindApproval:
			pending.Approvals = append(pending.Approvals, call)
		case kind == deferred.KindCall:
			pending.Calls = append(pending.Calls, call)
		case hasDecision || hasResult:
			problems = append(problems, fmt.Sprintf("tool call %s (%s) cannot be told to be an approval call or an external call: its tool defers dynamically or is an external tool behind an approval predicate, and the paused run's Requests were not given", id, c.ToolName))
		default:
			// Unanswered: the check below reports it missing.
			pending.Calls = append(pending.Calls, call)
		}
	}
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("resume: %s", strings.Join(problems, "; "))
	}
	if err := pending.Check(res); err != nil {
		return nil, nil, fmt.Errorf("resume: %w", err)
	}
	return kinds, args, nil
}

// category tells whether a pending call waits for a decision or a result:
// from the paused run's batch where given, whose entry it also returns, else
// from its tool's declaration (D12). "" means it cannot be told: a tool that
// defers dynamically, or an external tool whose approval predicate holds the
// call, since such a call may wait for its approval or, approved, for its
// result.
func (r *run) category(c Part, pos int) (deferred.Kind, *deferred.Call, error) {
	if reqs := r.in.Requests; reqs != nil {
		for _, k := range [...]struct {
			kind deferred.Kind
			list []deferred.Call
		}{{deferred.KindApproval, reqs.Approvals}, {deferred.KindCall, reqs.Calls}} {
			kind, list := k.kind, k.list
			if i := slices.IndexFunc(list, func(e deferred.Call) bool { return e.ToolCallID == c.ToolCallID }); i >= 0 {
				if list[i].ToolName != c.ToolName {
					return "", nil, fmt.Errorf("tool call %s is a call of %s in the message history but of %s in the paused run's Requests", c.ToolCallID, c.ToolName, list[i].ToolName)
				}
				return kind, &list[i], nil
			}
		}
	}
	t := r.byName[c.ToolName]
	if t == nil {
		return "", nil, nil
	}
	needs := t.requiresApproval
	if !needs && t.approvalFunc != nil {
		it := &callItem{part: c, pos: pos, tool: t, args: c.Args}
		var err error
		needs, err = protect(func() (bool, error) { return t.approvalFunc(r.runContext(r.ctx, it), t.def, c.Args) })
		if err != nil {
			return "", nil, fmt.Errorf("tool %s: approval predicate for call %s: %w", t.def.Name, c.ToolCallID, err)
		}
	}
	switch {
	case needs && t.external:
		return "", nil, nil
	case needs:
		return deferred.KindApproval, nil, nil
	case t.external:
		return deferred.KindCall, nil, nil
	}
	return "", nil, nil
}

// resultIDs lists the ids res answers, sorted.
func resultIDs(res *deferred.Results) []string {
	ids := append(sortedKeys(res.Approvals), sortedKeys(res.Calls)...)
	slices.Sort(ids)
	return slices.Compact(ids)
}
