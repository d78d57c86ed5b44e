package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/toolgate/toolgate/internal/deferred"
)

// RunInput is what a run starts from.
//
// A new conversation gives a Prompt. A follow-up gives the History of earlier
// runs and a Prompt. A resume of a paused run gives the paused run's History,
// the Results for its batch, and, where it has it, the paused run's Requests
// (D12); a Prompt is optional and goes after the results (D21).
type RunInput struct {
	// Prompt is the user's message; empty for a resume without one.
	Prompt string
	// History is the conversation so far, oldest first. The run never
	// changes its messages: it must not be changed while the run goes, and
	// the result's AllMessages shares them.
	History []Message
	// HistoryRoom says that History's array past its length is this run's:
	// the run appends its messages there instead of copying the history
	// first (what a long conversation's every run would otherwise pay). Set
	// it only for an array nobody else appends to (an earlier run's
	// AllMessages that no other run was given so).
	HistoryRoom bool
	// Results answers the pending calls of History's last model response;
	// non-nil makes the run a resume (D18–D27). Results.Metadata[id] goes to
	// an approved call as RunContext.ToolCallMetadata (D23) and, for a
	// denied call, onto its denied tool-return part's Metadata (D22, D37).
	Results *deferred.Results
	// Requests is the paused run's batch, used to tell approval calls from
	// external calls (D12) and to take the args an approved call runs with:
	// an entry's args are the model's, or the override args of a call that
	// was approved with them and deferred again (D24, D26). Nil: the tools'
	// declarations decide, and calls run with the history's args.
	Requests *deferred.Requests
	// RunID is this run's id; empty means a new one (Config.NewID). An id
	// already used in History is an error (D18).
	RunID string
	// ConversationID is the conversation's id. Empty means the one of
	// History's messages, or a new one for a new conversation; a value that
	// differs from History's is an error.
	ConversationID string
	// Deps is handed to tools and handlers as RunContext.Deps.
	Deps any
	// Caller is what the application said of who gave the prompt, handed
	// to tools, approval rules and handlers as RunContext.Caller.
	Caller json.RawMessage
	// BeforeEffects, when set, is called before the run executes a tool
	// (but one built WithoutEffects) or asks the handlers, each time: what
	// the run does before it has no
	// effect outside it (model requests aside), so a caller may run it
	// speculatively until then. An error ends the run with it.
	BeforeEffects func(context.Context) error
}

// RunResult is what a run ends with: a text output, or a batch of deferred
// calls when the run paused.
type RunResult struct {
	RunID          string `json:"run_id" msgpack:"run_id"`
	ConversationID string `json:"conversation_id" msgpack:"conversation_id"`
	// Output is the model's final text; empty when the run paused. Use
	// OutputAs to decode it as JSON.
	Output string `json:"output,omitempty" msgpack:"output,omitempty"`
	// Deferred is the batch the run paused with (D10, D15); nil when the run
	// ended with text.
	Deferred *deferred.Requests `json:"deferred,omitempty" msgpack:"deferred,omitempty"`
	// NewMessages are the messages this run added, oldest first.
	NewMessages []Message `json:"new_messages" msgpack:"new_messages"`
	// AllMessages is RunInput.History followed by NewMessages: the history to
	// resume or continue from. Once it holds HistoryRoomMin messages, its
	// array may have room past its length for the next run (HistoryRoom).
	AllMessages []Message `json:"-" msgpack:"-"`
	// HeldPrompt is the resume's Prompt when the run paused again before
	// asking the model (a call approved in it deferred once more, D26):
	// it is not in the history, so that it does not come before the
	// results of the calls still pending, and goes as the Prompt of the
	// next resume, after those results (D21).
	HeldPrompt string `json:"held_prompt,omitempty" msgpack:"held_prompt,omitempty"`
	// Usage is this run's usage.
	Usage Usage `json:"usage" msgpack:"usage"`
}

// Paused reports whether the run ended with a batch of deferred calls.
func (r *RunResult) Paused() bool { return r.Deferred != nil }

// OutputAs decodes the run's text output as JSON into T, for agents whose
// instructions ask the model for a JSON answer. A paused run is an error.
func OutputAs[T any](res *RunResult) (T, error) {
	var v T
	if res == nil {
		return v, errors.New("output: no result")
	}
	if res.Deferred != nil {
		return v, errors.New("output: the run paused with deferred tool calls")
	}
	s := strings.TrimSpace(res.Output)
	// Models often wrap JSON in a fenced block.
	if strings.HasPrefix(s, "```") {
		s = strings.TrimPrefix(s, "```")
		s = strings.TrimPrefix(s, "json")
		s = strings.TrimSuffix(strings.TrimSpace(s), "```")
	}
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return v, fmt.Errorf("output: decode %T: %w", v, err)
	}
	return v, nil
}

// Run runs the agent until it has an output or pauses. It is Events without
// the events.
func (a *Agent) Run(ctx context.Context, in RunInput) (*RunResult, error) {
	// Nobody reads text deltas here: the model is not asked to stream.
	for ev, err := range a.events(ctx, in, false) {
		if err != nil {
			return nil, err
		}
		if ev.Kind == EventRunDone {
			return ev.Result, nil
		}
	}
	return nil, errors.New("run ended without a result")
}

// errStopped ends a run whose event consumer stopped iterating.
var errStopped = errors.New("event consumer stopped")

// Events runs the agent and yields its events as they happen (D28–D31). The
// last event of a run that did not fail is EventRunDone with the RunResult; a
// run that fails yields one (Event{}, err) and ends. Stopping the iteration
// cancels the run.
func (a *Agent) Events(ctx context.Context, in RunInput) iter.Seq2[Event, error] {
	return a.events(ctx, in, true)
}

// events runs the agent; deltas says whether models get a StreamFunc.
func (a *Agent) events(ctx context.Context, in RunInput, deltas bool) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		r := &run{a: a, ctx: ctx, in: in, retries: map[string]int{}}
		if deltas {
			r.stream = func(delta string) {
				if delta != "" {
					_ = r.send(Event{Kind: EventTextDelta, Delta: delta})
				}
			}
		}
		// A streaming model may call StreamFunc from its own goroutine: yield
		// is serialised, and never called again once the consumer stopped.
		var mu sync.Mutex
		finished := false
		r.emit = func(ev Event) bool {
			mu.Lock()
			defer mu.Unlock()
			if finished || r.stopped.Load() {
				return false
			}
			if !yield(ev, nil) {
				r.stopped.Store(true)
				cancel()
				return false
			}
			return true
		}
		res, err := r.run()
		mu.Lock()
		defer mu.Unlock()
		// A model goroutine that streams after Request returned must not
		// reach yield once the run is over.
		finished = true
		if r.stopped.Load() {
			return
		}
		if err != nil {
			r.log().DebugContext(ctx, "run failed", slog.String("error", err.Error()))
			yield(Event{}, err)
			return
		}
		yield(Event{Kind: EventRunDone, RunID: res.RunID, ConversationID: res.ConversationID, Time: a.cfg.Clock(), Result: res}, nil)
	}
}

// run is the state of one run.
type run struct {
	a       *Agent
	ctx     context.Context
	in      RunInput
	id      string
	convID  string
	tools   []Tool
	byName  map[string]*Tool
	defs    []ToolDef
	all     []Message // history followed by the new messages
	nNew    int       // how many of all are new
	usage   Usage
	retries map[string]int
	emit    func(Event) bool
	stream  func(delta string) // ModelRequest.StreamFunc; nil: no deltas wanted
	stopped atomic.Bool
	logger  *slog.Logger
	// held is the resume's prompt, kept out of the history by a pause
	// (RunResult.HeldPrompt).
	held string
}

func (r *run) log() *slog.Logger {
	if r.logger == nil {
		return r.a.cfg.Logger
	}
	return r.logger
}

func (r *run) send(ev Event) error {
	ev.RunID, ev.ConversationID, ev.Time = r.id, r.convID, r.a.cfg.Clock()
	if !r.emit(ev) {
		return errStopped
	}
	return nil
}

func (r *run) newMessages() []Message { return r.all[len(r.all)-r.nNew:] }

// HistoryRoomMin is the length from which a run's AllMessages keeps the
// room its array has past its length, for the next run to append to
// (RunInput.HistoryRoom): a shorter history costs little to copy, and a
// paused conversation's state holds its array for as long as it waits.
const HistoryRoomMin = 64

func (r *run) allMessages() []Message {
	if len(r.all) < HistoryRoomMin {
		return slices.Clip(r.all)
	}
	return r.all
}

// messages is a snapshot of the history so far; appends of the run do not
// show through it.
func (r *run) messages() []Message { return r.all[:len(r.all):len(r.all)] }

func (r *run) appendMessage(m Message) {
	m.RunID, m.ConversationID, m.Timestamp = r.id, r.convID, r.a.cfg.Clock()
	r.all = append(r.all, m)
	r.nNew++
}

func (r *run) runContext(ctx context.Context, it *callItem) *RunContext {
	rc := &RunContext{
		Deps:           r.in.Deps,
		Caller:         r.in.Caller,
		RunID:          r.id,
		ConversationID: r.convID,
		Messages:       r.messages(),
		Usage:          r.usage,
	}
	rc = rc.WithContext(ctx)
	if it != nil {
		rc.ToolCallID = it.part.ToolCallID
		rc.ToolCallIndex = it.pos
		rc.ToolName = it.part.ToolName
		rc.ToolCallApproved = it.approved
		rc.ToolCallMetadata = it.toolMeta
		rc.Retry = r.retries[it.part.ToolName]
	}
	return rc
}

func (r *run) setup() error {
	cfg := r.a.cfg
	if r.in.HistoryRoom {
		r.all = r.in.History
	} else {
		// Clipped: the run's first append copies it, once.
		r.all = slices.Clip(r.in.History)
	}
	histConv := ""
	for _, m := range r.in.History {
		if m.ConversationID != "" {
			histConv = m.ConversationID
		}
		if r.in.RunID != "" && m.RunID == r.in.RunID {
			return fmt.Errorf("run id %s is already used in the message history", r.in.RunID)
		}
	}
	switch {
	case r.in.ConversationID != "" && histConv != "" && r.in.ConversationID != histConv:
		return fmt.Errorf("conversation id %s differs from the history's %s", r.in.ConversationID, histConv)
	case r.in.ConversationID != "":
		r.convID = r.in.ConversationID
	case histConv != "":
		r.convID = histConv
	default:
		r.convID = cfg.NewID()
	}
	r.id = r.in.RunID
	if r.id == "" {
		r.id = cfg.NewID()
	}
	r.logger = cfg.Logger.With(slog.String("run_id", r.id), slog.String("conversation_id", r.convID))
	tools, byName, err := r.a.tools(r.ctx)
	if err != nil {
		return err
	}
	r.tools, r.byName = tools, byName
	r.defs = make([]ToolDef, len(tools))
	for i, t := range tools {
		r.defs[i] = t.def
	}
	return nil
}

func (r *run) run() (*RunResult, error) {
	if err := r.setup(); err != nil {
		return nil, err
	}
	r.log().DebugContext(r.ctx, "run started", slog.Bool("resume", r.in.Results != nil), slog.Int("history", len(r.in.History)))
	if r.in.Results != nil {
		items, err := r.resumeItems()
		if err != nil {
			return nil, err
		}
		if err := r.phase(items, true); err != nil {
			return nil, err
		}
		reqs, err := r.finishStep(items, r.in.Prompt)
		if err != nil {
			return nil, err
		}
		if reqs != nil {
			return r.result("", reqs), nil
		}
	} else {
		if err := r.checkNoPending(); err != nil {
			return nil, err
		}
		switch {
		case r.in.Prompt != "":
			r.appendMessage(Message{Kind: KindRequest, Parts: []Part{{Kind: PartUserPrompt, Content: r.in.Prompt}}})
		case len(r.all) == 0:
			return nil, errors.New("prompt is empty and there is no history")
		case r.all[len(r.all)-1].Kind != KindRequest:
			return nil, errors.New("prompt is empty and the history ends with a model response")
		}
	}
	return r.loop()
}

// checkNoPending refuses to continue a history whose last model response has
// calls without results: the model would never see them answered.
func (r *run) checkNoPending() error {
	last := lastResponse(r.all)
	if last < 0 {
		return nil
	}
	settled := settledIDs(r.all[last+1:])
	var pending []string
	for _, p := range r.all[last].Parts {
		if p.Kind == PartToolCall && !settled[p.ToolCallID] {
			pending = append(pending, p.ToolCallID)
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("message history ends with unsettled tool calls %v: resume it with Results", pending)
	}
	return nil
}

// loop asks the model and handles its tool calls until it answers with text
// or the run pauses.
func (r *run) loop() (*RunResult, error) {
	for {
		if r.usage.Requests >= r.a.cfg.MaxModelRequests {
			return nil, fmt.Errorf("model request limit of %d reached", r.a.cfg.MaxModelRequests)
		}
		msg, err := r.request()
		if err != nil {
			return nil, err
		}
		var calls []Part
		var text []string
		for _, p := range msg.Parts {
			switch p.Kind {
			case PartToolCall:
				calls = append(calls, p)
			case PartText:
				text = append(text, p.Content)
			}
		}
		if len(calls) == 0 {
			if len(text) == 0 {
				return nil, errors.New("model returned neither text nor tool calls")
			}
			return r.result(strings.Join(text, ""), nil), nil
		}
		items := make([]*callItem, len(calls))
		for i, c := range calls {
			items[i] = &callItem{part: c, pos: i, tool: r.byName[c.ToolName], args: c.Args, state: stCheck}
		}
		if err := r.phase(items, true); err != nil {
			return nil, err
		}
		reqs, err := r.finishStep(items, "")
		if err != nil {
			return nil, err
		}
		if reqs != nil {
			return r.result("", reqs), nil
		}
	}
}

func (r *run) result(output string, reqs *deferred.Requests) *RunResult {
	if reqs != nil {
		r.log().DebugContext(r.ctx, "run paused", slog.Int("approvals", len(reqs.Approvals)), slog.Int("calls", len(reqs.Calls)))
	} else {
		r.log().DebugContext(r.ctx, "run done", slog.Int("model_requests", r.usage.Requests))
	}
	return &RunResult{
		RunID:          r.id,
		ConversationID: r.convID,
		Output:         output,
		Deferred:       reqs,
		NewMessages:    slices.Clone(r.newMessages()),
		AllMessages:    r.allMessages(),
		HeldPrompt:     r.held,
		Usage:          r.usage,
	}
}

// request sends the history to the model and appends its response.
func (r *run) request() (Message, error) {
	model := r.a.cfg.Model
	req := ModelRequest{
		Instructions: r.a.cfg.Instructions,
		Messages:     mergeRequests(r.all),
		Tools:        slices.Clone(r.defs),
		StreamFunc:   r.stream,
	}
	resp, err := model.Request(r.ctx, req)
	if err != nil {
		if r.stopped.Load() {
			return Message{}, errStopped
		}
		return Message{}, fmt.Errorf("model %s: %w", model.Name(), err)
	}
	if r.ctx.Err() != nil {
		return Message{}, fmt.Errorf("model %s: %w", model.Name(), r.ctx.Err())
	}
	u := resp.Usage
	u.Requests = 1
	r.usage.Add(u)
	name := resp.ModelName
	if name == "" {
		name = model.Name()
	}
	parts := make([]Part, 0, len(resp.Parts))
	for _, p := range resp.Parts {
		if p.Kind == PartToolCall {
			if p.ToolCallID == "" {
				p.ToolCallID = "call_" + r.a.cfg.NewID()
			}
			p.Args = normalizeArgs(p.Args)
		}
		parts = append(parts, p)
	}
	r.appendMessage(Message{Kind: KindResponse, Parts: parts, ModelName: name, Usage: &u})
	// Messages of r.all are never changed once appended; the event shares
	// this one.
	msg := &r.all[len(r.all)-1]
	if err := r.send(Event{Kind: EventModelResponse, Message: msg}); err != nil {
		return Message{}, err
	}
	return *msg, nil
}

// normalizeArgs keeps the model's args as sent when they are JSON; missing
// args become {}; text that is not JSON is kept as a JSON string so that the
// history stays encodable, and fails validation as not an object.
func normalizeArgs(args json.RawMessage) json.RawMessage {
	s := strings.TrimSpace(string(args))
	if s == "" || s == "null" {
		return json.RawMessage("{}")
	}
	if json.Valid(args) {
		return args
	}
	b, _ := json.Marshal(string(args))
	return b
}

// mergeRequests is the history as a model sees it: consecutive request
// messages (a paused run's partial results followed by a resume's) become one,
// tool returns and retries first, then the other parts, each in order.
func mergeRequests(msgs []Message) []Message {
	// out stays nil while the history needs no merging: it is then handed
	// over as it is, rather than copied for every model request.
	var out []Message
	for i := 0; i < len(msgs); {
		m := msgs[i]
		j := i + 1
		for m.Kind == KindRequest && j < len(msgs) && msgs[j].Kind == KindRequest {
			j++
		}
		if m.Kind != KindRequest || (j == i+1 && toolPartsFirst(m.Parts)) {
			if out != nil {
				out = append(out, m)
			}
			i = j
			continue
		}
		if out == nil {
			out = append(make([]Message, 0, len(msgs)), msgs[:i]...)
		}
		var tool, other []Part
		for _, r := range msgs[i:j] {
			for _, p := range r.Parts {
				if p.Kind == PartToolReturn || p.Kind == PartRetryPrompt {
					tool = append(tool, p)
				} else {
					other = append(other, p)
				}
			}
		}
		merged := msgs[j-1]
		merged.Parts = append(tool, other...)
		out = append(out, merged)
		i = j
	}
	if out == nil {
		return slices.Clip(msgs)
	}
	return out
}

// toolPartsFirst reports whether no tool return or retry follows another
// part: a request that merging would leave as it is.
func toolPartsFirst(parts []Part) bool {
	other := false
	for _, p := range parts {
		if p.Kind == PartToolReturn || p.Kind == PartRetryPrompt {
			if other {
				return false
			}
		} else {
			other = true
		}
	}
	return true
}

func lastResponse(msgs []Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Kind == KindResponse {
			return i
		}
	}
	return -1
}

// settledIDs are the ids of calls that a tool return or retry prompt answers.
func settledIDs(msgs []Message) map[string]bool {
	ids := map[string]bool{}
	for _, m := range msgs {
		if m.Kind != KindRequest {
			continue
		}
		for _, p := range m.Parts {
			if p.Kind == PartToolReturn || p.Kind == PartRetryPrompt {
				ids[p.ToolCallID] = true
			}
		}
	}
	return ids
}
