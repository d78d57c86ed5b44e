package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/internal/deferred"
)

type itemState int

const (
	stCheck   itemState = iota // to validate, then defer or run
	stRun                      // validated; its body runs in this phase
	stPending                  // deferred: waits for a decision or a result
	stSettled                  // has its tool-return or retry part
)

// callItem is one tool call as a step handles it.
type callItem struct {
	part     Part            // the model's call, as in history
	pos      int             // its place among the response's tool calls
	tool     *Tool           // nil: the model named no known tool
	args     json.RawMessage // args to validate and run with (override args, D24)
	approved bool
	toolMeta json.RawMessage // Results.Metadata of an approved call (D23)
	state    itemState

	kind deferred.Kind   // stPending
	meta json.RawMessage // stPending: the deferral's metadata (D8)

	result  Part   // stSettled
	content string // stSettled: ToolReturn.Content, a user part after all tool parts

	decoded any
	done    chan struct{}
	val     any
	err     error
}

func (it *callItem) pend(kind deferred.Kind, meta json.RawMessage) {
	it.state, it.kind, it.meta = stPending, kind, meta
}

func (it *callItem) settleReturn(value json.RawMessage, outcome Outcome, meta json.RawMessage, content string) {
	if len(value) == 0 {
		value = json.RawMessage("null")
	}
	it.state = stSettled
	it.result = Part{Kind: PartToolReturn, ToolName: it.part.ToolName, ToolCallID: it.part.ToolCallID, Value: value, Outcome: outcome, Metadata: meta}
	it.content = content
}

func (it *callItem) settleRetry(msg string) {
	it.state = stSettled
	it.result = Part{Kind: PartRetryPrompt, ToolName: it.part.ToolName, ToolCallID: it.part.ToolCallID, Content: msg}
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// phase settles what it can of items: first the checks of each call, one
// after another in emission order, then the bodies, concurrently. Events go
// out in emission order, call by call: ToolCall (when withCall) and then
// ToolResult if the call settled (D28, D30, D31).
func (r *run) phase(items []*callItem, withCall bool) error {
	for _, it := range items {
		if it.state == stCheck {
			if err := r.check(it); err != nil {
				return err
			}
		}
	}
	if r.in.BeforeEffects != nil && slices.ContainsFunc(items, func(it *callItem) bool { return it.state == stRun && !it.tool.noEffects }) {
		if err := r.in.BeforeEffects(r.ctx); err != nil {
			return err
		}
	}
	stop := r.runBodies(items)
	var err error
	for _, it := range items {
		if withCall {
			if err = r.send(Event{Kind: EventToolCall, Part: &it.part}); err != nil {
				break
			}
		}
		if it.state == stRun {
			<-it.done
			r.usage.ToolCalls++
			if err = r.outcome(it, it.val, it.err); err != nil {
				break
			}
		}
		if it.state == stSettled {
			// A settled call's part no longer changes; the event shares it
			// (events are read-only).
			if err = r.send(Event{Kind: EventToolResult, Part: &it.result}); err != nil {
				break
			}
		}
	}
	stop()
	return err
}

// runBodies starts the bodies of the items to run, each on a goroutine of
// its own, and returns what cancels and waits for them. A phase with none
// to run (calls deferred, or resumed from their replies) makes no context
// and no wait group: that was most of a deferred call's phases.
func (r *run) runBodies(items []*callItem) (stop func()) {
	if !slices.ContainsFunc(items, func(it *callItem) bool { return it.state == stRun }) {
		return func() {}
	}
	ctx, cancel := context.WithCancel(r.ctx)
	var wg sync.WaitGroup
	for _, it := range items {
		if it.state != stRun {
			continue
		}
		it.done = make(chan struct{})
		rc := r.runContext(ctx, it)
		wg.Go(func() {
			defer close(it.done)
			it.val, it.err = protect(func() (any, error) { return it.tool.call(rc, it.decoded) })
		})
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

// protect turns a panic of application code into an error.
func protect[T any](fn func() (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return fn()
}

// check validates a call and decides whether it is deferred, settled or run
// (D1–D5, D23, D24).
func (r *run) check(it *callItem) error {
	t := it.tool
	if t == nil {
		names := make([]string, len(r.tools))
		for i, t := range r.tools {
			names[i] = t.def.Name
		}
		it.settleRetry(fmt.Sprintf("Unknown tool name: %q. Available tools: %s", it.part.ToolName, strings.Join(names, ", ")))
		return nil
	}
	if err := t.schema.validate(it.args); err != nil {
		return r.chargeRetry(it, fmt.Sprintf("Invalid args for tool %s: %v", t.def.Name, err))
	}
	decoded, err := t.decode(it.args)
	if err != nil {
		return r.chargeRetry(it, fmt.Sprintf("Invalid args for tool %s: %v", t.def.Name, err))
	}
	it.decoded = decoded
	// Approval comes before everything else that may defer or run the call,
	// external tools included (D4): an external call the predicate holds
	// waits for a decision first and, once approved, is deferred as an
	// external call with the args it was approved with (D24, D26).
	if !it.approved {
		needs := t.requiresApproval
		if !needs && t.approvalFunc != nil {
			needs, err = protect(func() (bool, error) { return t.approvalFunc(r.runContext(r.ctx, it), t.def, it.args) })
			if err != nil {
				return fmt.Errorf("tool %s: approval predicate for call %s: %w", t.def.Name, it.part.ToolCallID, err)
			}
		}
		if needs {
			it.pend(deferred.KindApproval, nil)
			return nil
		}
	}
	if t.external {
		it.pend(deferred.KindCall, nil)
		return nil
	}
	if t.validate != nil {
		_, err := protect(func() (any, error) { return nil, t.validate(r.runContext(r.ctx, it), decoded) })
		if err != nil {
			return r.outcome(it, nil, err)
		}
	}
	it.state = stRun
	return nil
}

// outcome reads what a validator (val nil, err non-nil) or body returned.
func (r *run) outcome(it *callItem, val any, err error) error {
	if err == nil {
		return r.settleValue(it, val)
	}
	// Declared after the nil check: errors.As makes them escape, and most
	// calls succeed.
	var d *deferred.Deferral
	var retry *ModelRetryError
	var failed *ToolFailedError
	switch {
	case errors.As(err, &d):
		if d.Kind != deferred.KindApproval && d.Kind != deferred.KindCall {
			return fmt.Errorf("tool %s: call %s deferred with unknown kind %q", it.part.ToolName, it.part.ToolCallID, d.Kind)
		}
		it.pend(d.Kind, d.Metadata)
		return nil
	case errors.As(err, &retry):
		return r.chargeRetry(it, retry.Message)
	case errors.As(err, &failed):
		it.settleReturn(jsonString(failed.Message), OutcomeFailed, nil, "")
		return nil
	default:
		return fmt.Errorf("tool %s: call %s: %w", it.part.ToolName, it.part.ToolCallID, err)
	}
}

func (r *run) settleValue(it *callItem, val any) error {
	var tr *ToolReturn
	switch v := val.(type) {
	case ToolReturn:
		tr = &v
	case *ToolReturn:
		tr = v
	}
	if tr == nil {
		b, err := json.Marshal(val)
		if err != nil {
			return fmt.Errorf("tool %s: call %s: result is not JSON: %w", it.part.ToolName, it.part.ToolCallID, err)
		}
		it.settleReturn(b, OutcomeSuccess, nil, "")
		return nil
	}
	b, err := json.Marshal(tr.Value)
	if err != nil {
		return fmt.Errorf("tool %s: call %s: result is not JSON: %w", it.part.ToolName, it.part.ToolCallID, err)
	}
	var meta json.RawMessage
	if tr.Metadata != nil {
		if meta, err = json.Marshal(tr.Metadata); err != nil {
			return fmt.Errorf("tool %s: call %s: result metadata is not JSON: %w", it.part.ToolName, it.part.ToolCallID, err)
		}
	}
	it.settleReturn(b, OutcomeSuccess, meta, tr.Content)
	return nil
}

// chargeRetry sends msg back as a retry prompt, charged to the tool's retry
// budget for this run (D5, D27).
func (r *run) chargeRetry(it *callItem, msg string) error {
	name := it.part.ToolName
	r.retries[name]++
	if n, max := r.retries[name], it.tool.maxRetries; n > max {
		return fmt.Errorf("tool %s exceeded its retry budget of %d in this run (call %s): %s", name, max, it.part.ToolCallID, msg)
	}
	it.settleRetry(msg)
	return nil
}

// finishStep handles what a phase left pending: the batch event, the
// handlers, the step's request message, and the pause (D9–D17, D26). prompt,
// when not empty, goes last in the request message (D21), or, when the step
// pauses, is held for the next resume (RunResult.HeldPrompt). It returns the
// batch when the run pauses.
func (r *run) finishStep(items []*callItem, prompt string) (*deferred.Requests, error) {
	pending := pendingItems(items)
	if len(pending) > 0 {
		if dups := duplicateIDs(pending); len(dups) > 0 {
			return nil, fmt.Errorf("duplicate tool_call_id among deferred calls: %s", strings.Join(dups, ", "))
		}
		reqs := batch(pending)
		if err := r.send(Event{Kind: EventDeferredRequests, Requests: reqs}); err != nil {
			return nil, err
		}
		if len(r.a.cfg.Handlers) > 0 {
			if r.in.BeforeEffects != nil {
				if err := r.in.BeforeEffects(r.ctx); err != nil {
					return nil, err
				}
			}
			merged, err := r.askHandlers(reqs)
			if err != nil {
				return nil, err
			}
			if merged != nil {
				if err := r.send(Event{Kind: EventDeferredResults, Results: merged}); err != nil {
					return nil, err
				}
				var resolved []*callItem
				for _, it := range pending {
					if applyResults(it, merged) {
						resolved = append(resolved, it)
					}
				}
				if err := r.phase(resolved, false); err != nil {
					return nil, err
				}
			}
		}
	}
	var parts, user []Part
	for _, it := range items {
		if it.state != stSettled {
			continue
		}
		parts = append(parts, it.result)
		if it.content != "" {
			user = append(user, Part{Kind: PartUserPrompt, Content: it.content})
		}
	}
	parts = append(parts, user...)
	pending = pendingItems(items)
	switch {
	case prompt == "":
	case len(pending) == 0:
		parts = append(parts, Part{Kind: PartUserPrompt, Content: prompt})
	default:
		// The run pauses before the model is asked: the prompt waits for
		// the next resume, so that the history has it after the results
		// still to come, where the model reads it (mergeRequests).
		r.held = prompt
	}
	if len(parts) > 0 {
		r.appendMessage(Message{Kind: KindRequest, Parts: parts})
	}
	if len(pending) == 0 {
		return nil, nil
	}
	if !r.a.cfg.AllowDeferred {
		return nil, fmt.Errorf("deferred tool calls %s are unresolved: allow deferred requests as an output of the run (Config.AllowDeferred) or add a handler that resolves them", strings.Join(itemIDs(pending), ", "))
	}
	return batch(pending), nil
}

func pendingItems(items []*callItem) []*callItem {
	var out []*callItem
	for _, it := range items {
		if it.state == stPending {
			out = append(out, it)
		}
	}
	return out
}

func itemIDs(items []*callItem) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.part.ToolCallID
	}
	return ids
}

func duplicateIDs(items []*callItem) []string {
	seen := map[string]int{}
	var dups []string
	for _, it := range items {
		id := it.part.ToolCallID
		seen[id]++
		if seen[id] == 2 {
			dups = append(dups, id)
		}
	}
	return dups
}

// batch lists pending calls, each category in emission order (D7, D8).
//
// An entry has the model's tool name and call id and the args the call will
// run with once answered: the model's args, except for a call approved with
// Approved.OverrideArgs that deferred again (D17, D26), whose entry carries
// the override args (D24). A worker or approver thus sees exactly the args it
// answers for, and a resume given this batch as RunInput.Requests runs an
// approved entry with them. History keeps the model's original call.
func batch(pending []*callItem) *deferred.Requests {
	reqs := &deferred.Requests{Calls: []deferred.Call{}, Approvals: []deferred.Call{}, Metadata: map[string]json.RawMessage{}}
	for _, it := range pending {
		c := deferred.Call{ToolName: it.part.ToolName, Args: it.args, ToolCallID: it.part.ToolCallID}
		if it.kind == deferred.KindApproval {
			reqs.Approvals = append(reqs.Approvals, c)
		} else {
			reqs.Calls = append(reqs.Calls, c)
		}
		if it.meta != nil {
			reqs.Metadata[it.part.ToolCallID] = it.meta
		}
	}
	return reqs
}

// askHandlers offers the batch to the handlers in order, each seeing what is
// still unresolved (D13, D16). It returns the merged results, nil when every
// handler declined.
func (r *run) askHandlers(reqs *deferred.Requests) (*deferred.Results, error) {
	remaining := cloneRequests(reqs)
	var merged *deferred.Results
	for i, h := range r.a.cfg.Handlers {
		offered := cloneRequests(remaining)
		res, err := protect(func() (*deferred.Results, error) { return h.HandleDeferred(r.runContext(r.ctx, nil), offered) })
		if err != nil {
			return nil, fmt.Errorf("deferred handler %d: %w", i, err)
		}
		if res == nil || len(res.Approvals) == 0 && len(res.Calls) == 0 {
			continue
		}
		// BuildResults refuses ids that are not offered, answers in the
		// wrong category and values that are not answers (D16, D20).
		if _, err := remaining.BuildResults(res.Approvals, res.Calls, res.Metadata, false); err != nil {
			return nil, fmt.Errorf("deferred handler %d: %w", i, err)
		}
		if merged == nil {
			merged = &deferred.Results{Approvals: map[string]deferred.Decision{}, Calls: map[string]deferred.Result{}, Metadata: map[string]json.RawMessage{}}
		}
		for id, d := range res.Approvals {
			merged.Approvals[id] = d
			if m, ok := res.Metadata[id]; ok {
				merged.Metadata[id] = m
			}
		}
		for id, c := range res.Calls {
			merged.Calls[id] = c
			if m, ok := res.Metadata[id]; ok {
				merged.Metadata[id] = m
			}
		}
		remaining = remaining.Remaining(res)
		if remaining == nil {
			break
		}
	}
	return merged, nil
}

func cloneRequests(r *deferred.Requests) *deferred.Requests {
	out := &deferred.Requests{
		Calls:     slices.Clone(r.Calls),
		Approvals: slices.Clone(r.Approvals),
		Metadata:  make(map[string]json.RawMessage, len(r.Metadata)),
	}
	for k, v := range r.Metadata {
		out.Metadata[k] = v
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// applyResults applies res to a pending call; it reports whether res answers
// it. An approved call goes back to checking with ToolCallApproved set; the
// others settle (D22–D25).
func applyResults(it *callItem, res *deferred.Results) bool {
	id := it.part.ToolCallID
	if it.kind == deferred.KindApproval {
		d, ok := res.Approvals[id]
		if !ok {
			return false
		}
		applyDecision(it, d, res.Metadata[id])
		return true
	}
	c, ok := res.Calls[id]
	if !ok {
		return false
	}
	applyResult(it, c)
	return true
}

// applyDecision applies a decision and the answer's metadata for the call
// (Results.Metadata[id]). An approved call runs with the metadata as
// RunContext.ToolCallMetadata (D23). A denied call keeps it on its denied
// tool-return part's Metadata, where the application reads why it was denied
// (an expired approval carries {"reason":"expired"}, D37); the model does not
// see part metadata.
func applyDecision(it *callItem, d deferred.Decision, meta json.RawMessage) {
	switch d := d.(type) {
	case deferred.Approved:
		it.approved, it.toolMeta, it.state = true, meta, stCheck
		it.meta, it.kind = nil, ""
		if o := strings.TrimSpace(string(d.OverrideArgs)); o != "" && o != "null" {
			it.args = d.OverrideArgs
		}
	case deferred.Denied:
		msg := d.Message
		if msg == "" {
			msg = deferred.DefaultDenyMessage
		}
		it.settleReturn(jsonString(msg), OutcomeDenied, nullToNil(meta), "")
	}
}

func applyResult(it *callItem, res deferred.Result) {
	switch v := res.(type) {
	case deferred.Value:
		it.settleReturn(v.Value, OutcomeSuccess, nil, "")
	case deferred.Return:
		it.settleReturn(v.Value, OutcomeSuccess, nullToNil(v.Metadata), v.Content)
	case deferred.Retry:
		// Results from outside use no retry budget (D25, D27).
		it.settleRetry(v.Message)
	case deferred.Failed:
		it.settleReturn(jsonString(v.Message), OutcomeFailed, nil, "")
	}
}

// nullToNil drops metadata that says nothing, so that the part carries no
// metadata key.
func nullToNil(m json.RawMessage) json.RawMessage {
	if s := strings.TrimSpace(string(m)); s == "" || s == "null" {
		return nil
	}
	return m
}
