package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/wire"
)

// States of a deferred call in the conversation view.
const (
	statePending  = "pending"
	stateApproved = "approved"
	stateDenied   = "denied"
	stateExpired  = "expired"
	stateReturned = "returned"
	stateFailed   = "failed"
	stateDecided  = "decided" // a decision was applied; which one shows when the follow-up runs
)

// kindApprovedCall is an approval that, once approved, was deferred again
// as an external call under the same tool_call_id (the orchestrator runs
// every approved tool on a worker): one row, whose state is the call's and
// whose "decided by" stays the approver's.
const kindApprovedCall = "approval → call"

// transcript is a conversation as the page shows it.
type transcript struct {
	ID      string
	Source  string // "events" or "orchestrator"
	Status  string
	Output  string
	Error   string
	Entries []chatEntry
	Calls   []*deferredCall
	Note    string // why parts may be missing
}

// chatEntry is one bubble: a prompt, model text, a tool call or a return.
type chatEntry struct {
	Role   string // user, assistant, tool, system, event
	Text   string
	Call   *callRef
	Return *returnRef
	Time   time.Time
}

type callRef struct {
	Tool     string
	ID       string
	ArgsText string
	Deferred *deferredCall
}

type returnRef struct {
	Tool    string
	ID      string
	Content string
	Outcome string
}

// deferredCall is a call the run could not finish itself.
type deferredCall struct {
	RunID     string
	ID        string
	Tool      string
	Kind      string // approval or call
	State     string
	DecidedBy string
	Message   string
	Deadline  time.Time
	// unserved: Message says why the call waits (no worker takes its
	// tool's calls), which its answer ends.
	unserved bool
}

// builder folds a conversation's events into a transcript.
type builder struct {
	t       transcript
	calls   map[string]*deferredCall // by tool_call_id
	refs    map[string]*callRef
	decided *decidedLog
}

func newBuilder(id string, decided *decidedLog) *builder {
	return &builder{t: transcript{ID: id}, calls: map[string]*deferredCall{}, refs: map[string]*callRef{}, decided: decided}
}

func (b *builder) call(runID, id, tool, kind string) *deferredCall {
	c, ok := b.calls[id]
	if !ok {
		c = &deferredCall{RunID: runID, ID: id, Tool: tool, Kind: kind, State: statePending}
		b.calls[id] = c
		b.t.Calls = append(b.t.Calls, c)
		if r := b.refs[id]; r != nil {
			r.Deferred = c
		}
	}
	switch {
	case c.Kind == "":
		c.Kind = kind
	case c.Kind == "approval" && kind == "call":
		c.Kind = kindApprovedCall
	}
	if c.RunID == "" {
		c.RunID = runID
	}
	return c
}

// The JSON shapes of agent events inside wire.Event.Data.
type agentPart struct {
	Kind       string          `json:"part_kind"`
	Content    string          `json:"content"`
	ToolName   string          `json:"tool_name"`
	ToolCallID string          `json:"tool_call_id"`
	Args       json.RawMessage `json:"args"`
	Value      json.RawMessage `json:"value"`
	Outcome    string          `json:"outcome"`
}

type agentEvent struct {
	Part    *agentPart `json:"part"`
	Message *struct {
		Kind  string      `json:"kind"`
		Parts []agentPart `json:"parts"`
	} `json:"message"`
	Requests *struct {
		Calls     []agentPart `json:"calls"`
		Approvals []agentPart `json:"approvals"`
	} `json:"requests"`
	Results *struct {
		Approvals map[string]json.RawMessage `json:"approvals"`
		Calls     map[string]json.RawMessage `json:"calls"`
	} `json:"results"`
}

func (b *builder) observe(ev wire.Event, at time.Time) {
	switch ev.Type {
	case wire.EventRunStarted:
		var d wire.RunStarted
		_ = json.Unmarshal(ev.Data, &d)
		if d.Prompt != "" {
			b.t.Entries = append(b.t.Entries, chatEntry{Role: "user", Text: d.Prompt, Time: at})
		}
		b.t.Status = "running"
	case wire.EventModelResponse:
		b.modelResponse(ev, at)
	case wire.EventToolResult:
		b.toolResult(ev, at)
	case wire.EventDeferredRequests:
		var d agentEvent
		if json.Unmarshal(ev.Data, &d) != nil || d.Requests == nil {
			return
		}
		for _, p := range d.Requests.Approvals {
			b.call(ev.RunID, p.ToolCallID, p.ToolName, "approval")
		}
		for _, p := range d.Requests.Calls {
			b.call(ev.RunID, p.ToolCallID, p.ToolName, "call")
		}
	case wire.EventDeferredResults:
		b.deferredResults(ev)
	case wire.EventRunPaused:
		var pending []wire.PendingCall
		if json.Unmarshal(ev.Data, &pending) == nil {
			for _, p := range pending {
				c := b.call(p.RunID, p.ToolCallID, p.ToolName, p.Kind)
				c.State, c.Deadline = statePending, p.Deadline
			}
		}
		b.t.Status = "paused"
	case wire.EventToolUnserved:
		var d wire.ToolUnserved
		if c := b.calls[ev.ToolCallID]; c != nil && c.State == statePending && (c.Message == "" || c.unserved) && json.Unmarshal(ev.Data, &d) == nil {
			c.Message, c.unserved = d.Reason, true
		}
	case wire.EventReplyApplied:
		b.replyApplied(ev)
	case wire.EventCallsExpired:
		b.settlePending(ev.RunID, nil, func(c *deferredCall) { c.State = stateExpired })
	case wire.EventConversationCancelled:
		var d wire.ConversationCancelled
		_ = json.Unmarshal(ev.Data, &d)
		b.settlePending(ev.RunID, d.ToolCallIDs, func(c *deferredCall) {
			c.State, c.Message = stateFailed, d.Reason
			if c.Kind == "approval" {
				c.State = stateDenied
			}
		})
		b.t.Status = "cancelled"
	case wire.EventRunCompleted:
		var d wire.RunCompleted
		_ = json.Unmarshal(ev.Data, &d)
		b.t.Status, b.t.Output = "completed", d.Output
	case wire.EventRunFailed:
		var d wire.RunFailed
		_ = json.Unmarshal(ev.Data, &d)
		b.t.Status, b.t.Error = "failed", d.Error
	}
}

// settlePending settles the pending calls of run (those of ids, when
// given) with settle.
func (b *builder) settlePending(runID string, ids []string, settle func(*deferredCall)) {
	for _, c := range b.t.Calls {
		if c.RunID == runID && c.State == statePending && (ids == nil || slices.Contains(ids, c.ID)) {
			settle(c)
		}
	}
}

// modelResponse adds the response's text and its tool calls.
func (b *builder) modelResponse(ev wire.Event, at time.Time) {
	var d agentEvent
	if json.Unmarshal(ev.Data, &d) != nil || d.Message == nil {
		return
	}
	for _, p := range d.Message.Parts {
		switch p.Kind {
		case "text":
			b.t.Entries = append(b.t.Entries, chatEntry{Role: "assistant", Text: p.Content, Time: at})
		case "tool-call":
			ref := &callRef{Tool: p.ToolName, ID: p.ToolCallID, ArgsText: indent(p.Args), Deferred: b.calls[p.ToolCallID]}
			b.refs[p.ToolCallID] = ref
			b.t.Entries = append(b.t.Entries, chatEntry{Role: "assistant", Call: ref, Time: at})
		}
	}
}

// toolResult adds what a tool returned (or the retry it asked for) and
// settles its deferred call by it.
func (b *builder) toolResult(ev wire.Event, at time.Time) {
	var d agentEvent
	if json.Unmarshal(ev.Data, &d) != nil || d.Part == nil {
		return
	}
	p := d.Part
	ret := &returnRef{Tool: p.ToolName, ID: p.ToolCallID, Outcome: p.Outcome}
	switch p.Kind {
	case "retry-prompt":
		ret.Content, ret.Outcome = p.Content, "retry"
	default:
		ret.Content = indent(p.Value)
		if ret.Content == "" {
			ret.Content = p.Content
		}
	}
	if ret.Outcome == "" {
		ret.Outcome = "success"
	}
	b.t.Entries = append(b.t.Entries, chatEntry{Role: "tool", Return: ret, Time: at})
	if c := b.calls[p.ToolCallID]; c != nil {
		b.settleByReturn(c, ret)
	}
}

// deferredResults settles the calls an inline handler resolved.
func (b *builder) deferredResults(ev wire.Event) {
	var d agentEvent
	if json.Unmarshal(ev.Data, &d) != nil || d.Results == nil {
		return
	}
	var v struct {
		Kind    string `json:"kind"`
		Message string `json:"message"`
	}
	for id, raw := range d.Results.Approvals {
		c := b.call(ev.RunID, id, "", "approval")
		var flag bool
		v.Kind, v.Message = "", ""
		switch {
		case json.Unmarshal(raw, &flag) == nil:
			c.State = map[bool]string{true: stateApproved, false: stateDenied}[flag]
		case json.Unmarshal(raw, &v) == nil && v.Kind == "tool-denied":
			c.State, c.Message = stateDenied, v.Message
		default:
			c.State = stateApproved
		}
		c.DecidedBy = "inline handler"
	}
	for id, raw := range d.Results.Calls {
		c := b.call(ev.RunID, id, "", "call")
		v.Kind, v.Message = "", ""
		c.State = stateReturned
		if json.Unmarshal(raw, &v) == nil && v.Kind == "tool-failed" {
			c.State, c.Message = stateFailed, v.Message
		}
		c.DecidedBy = "inline handler"
	}
}

// replyApplied settles a call by the reply applied to it, naming who
// decided; a decision made in this inbox says so.
func (b *builder) replyApplied(ev wire.Event) {
	var d wire.ReplyApplied
	_ = json.Unmarshal(ev.Data, &d)
	c := b.call(ev.RunID, ev.ToolCallID, "", d.Kind)
	switch {
	case d.Kind == "call" && d.Outcome == "failed":
		c.State = stateFailed
	case d.Kind == "call":
		c.State = stateReturned
	case d.Approved != nil:
		c.State = map[bool]string{true: stateApproved, false: stateDenied}[*d.Approved]
		c.Message = d.Message
	default:
		c.State = stateDecided
	}
	if c.unserved {
		// Why it waited no longer applies.
		c.Message, c.unserved = "", false
	}
	// A worker's reply names no approver: an approved call that ran
	// keeps the name of who approved it.
	if d.ApproverID != "" {
		c.DecidedBy = d.ApproverID
	}
	// The decision made here, when the applied one is (or may be) it.
	if own, ok := b.decided.get(keyOf(ev.RunID, ev.ToolCallID)); ok && d.Kind != "call" &&
		(d.ApproverID == "" || d.ApproverID == own.ApproverID && (d.Approved == nil || *d.Approved == own.Approved)) {
		c.DecidedBy = own.ApproverID + " (this inbox)"
		if d.Approved == nil {
			c.State = map[bool]string{true: stateApproved, false: stateDenied}[own.Approved]
			c.Message = own.Message
		}
		if own.Approved && len(own.OverrideArgs) > 0 {
			// The transcript shows the model's args; the tool ran
			// with these.
			c.Message = "approved with edited args " + string(own.OverrideArgs)
		}
	}
}

// settleByReturn reads a deferred call's fate from the return its
// follow-up run added: for an approval, whether it ran; for an external
// call, how it ended.
func (b *builder) settleByReturn(c *deferredCall, ret *returnRef) {
	if c.State == stateExpired {
		return
	}
	switch c.Kind {
	case "approval":
		switch ret.Outcome {
		case "denied":
			if c.State != stateDenied {
				c.State = stateDenied
			}
			if c.Message == "" {
				c.Message = ret.Content
			}
		default:
			c.State = stateApproved
		}
	default:
		switch ret.Outcome {
		case "failed":
			c.State = stateFailed
		default:
			c.State = stateReturned
		}
	}
}

// transcriptFromEvents replays the conversation's events.
func (in *Inbox) transcriptFromEvents(ctx context.Context, id string) (*transcript, error) {
	evs, err := approver.ScanEvents(ctx, in.cfg.Bus, id)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, nil
	}
	b := newBuilder(id, in.decided)
	for _, se := range evs {
		b.observe(se.Event, se.Time)
	}
	b.t.Source = "events"
	return &b.t, nil
}

// transcriptFromOrchestrator takes messages and status from the
// orchestrator (which has the prompts too) and the deferred calls' states
// from the events.
func (in *Inbox) transcriptFromOrchestrator(ctx context.Context, id string) (*transcript, error) {
	conv, err := in.cfg.Orchestrator.Conversation(ctx, id)
	var apiErr *client.APIError
	if errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	fromEvents, err := in.transcriptFromEvents(ctx, id)
	if err != nil {
		return nil, err
	}
	b := newBuilder(id, in.decided)
	if fromEvents != nil {
		for _, c := range fromEvents.Calls {
			b.calls[c.ID] = c
			b.t.Calls = append(b.t.Calls, c)
		}
	}
	for _, p := range conv.Pending {
		c := b.call(p.RunID, p.ToolCallID, p.ToolName, p.Kind)
		c.State, c.Deadline = statePending, p.Deadline
	}
	for _, raw := range conv.Messages {
		var m struct {
			Request  []client.Part `json:"request"`
			Response []client.Part `json:"response"`
		}
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		for _, p := range m.Request {
			switch {
			case p.System != nil && *p.System != "":
				b.t.Entries = append(b.t.Entries, chatEntry{Role: "system", Text: *p.System})
			case p.User != nil:
				b.t.Entries = append(b.t.Entries, chatEntry{Role: "user", Text: *p.User})
			case p.Return != nil:
				ret := &returnRef{Tool: p.Return.Tool, ID: p.Return.ID, Content: indent(p.Return.Content), Outcome: p.Return.Outcome}
				b.t.Entries = append(b.t.Entries, chatEntry{Role: "tool", Return: ret})
				if c := b.calls[ret.ID]; c != nil && (c.State == statePending || c.State == stateDecided) {
					b.settleByReturn(c, ret)
				}
			case p.Retry != nil:
				b.t.Entries = append(b.t.Entries, chatEntry{Role: "tool", Return: &returnRef{Tool: p.Retry.Tool, ID: p.Retry.ID, Content: p.Retry.Message, Outcome: "retry"}})
			}
		}
		for _, p := range m.Response {
			switch {
			case p.Text != nil:
				b.t.Entries = append(b.t.Entries, chatEntry{Role: "assistant", Text: *p.Text})
			case p.Call != nil:
				ref := &callRef{Tool: p.Call.Tool, ID: p.Call.ID, ArgsText: indent(p.Call.Args), Deferred: b.calls[p.Call.ID]}
				b.refs[p.Call.ID] = ref
				b.t.Entries = append(b.t.Entries, chatEntry{Role: "assistant", Call: ref})
			}
		}
	}
	b.t.Status, b.t.Error, b.t.Source = conv.Status, conv.Error, "orchestrator"
	// The orchestrator's output is a string.
	_ = json.Unmarshal(conv.Output, &b.t.Output)
	return &b.t, nil
}

func (in *Inbox) conversation(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := wire.EventSubject(id); err != nil {
		in.render(w, http.StatusNotFound, "conversation.html", pageData{Title: "Conversation", ID: in.cfg.ID, Error: fmt.Sprintf("%q is not a conversation id.", id)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	var (
		t   *transcript
		err error
	)
	if in.cfg.Orchestrator != nil {
		t, err = in.transcriptFromOrchestrator(ctx, id)
	} else {
		t, err = in.transcriptFromEvents(ctx, id)
	}
	switch {
	case err != nil:
		in.log.ErrorContext(ctx, "conversation view", slog.String("conversation_id", id), slog.Any("error", err))
		in.render(w, http.StatusBadGateway, "conversation.html", pageData{Title: "Conversation " + id, ID: in.cfg.ID, Error: "The conversation could not be read: " + err.Error()})
		return
	case t == nil:
		in.render(w, http.StatusNotFound, "conversation.html", pageData{Title: "Conversation " + id, ID: in.cfg.ID, Error: "No events of conversation " + id + " are stored (unknown, or older than the events stream keeps)."})
		return
	}
	if t.Source == "events" {
		t.Note = "Built from the conversation's events: prompts show only where the run_started event carries them; pass --orchestrator for the full history."
	}
	in.render(w, http.StatusOK, "conversation.html", pageData{Title: "Conversation " + id, ID: in.cfg.ID, Conv: t})
}
