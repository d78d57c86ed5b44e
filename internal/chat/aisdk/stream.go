package aisdk

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/chat"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// stream writes one response of the chat as a UI message stream, each
// chunk under the id of its place in the response: its mode and a
// chat.Cursor.
type stream struct {
	*chat.SSE
	openText string // the text part open, if any
	inStep   bool
	// shown are the tool calls the message being streamed holds: a result
	// for another call (one of an earlier message, answered with a new
	// user message) announces the call first.
	shown map[string]bool
	// mode says how the response began (a mode* letter): what a
	// reconnect needs to make its chunks again.
	mode byte
	// at is the place of the next chunk.
	at chat.Cursor
	// skip, on a reconnect, is the place of the last chunk the client
	// has: the chunks up to it are made again, to know the state there,
	// but not sent.
	skip *chat.Cursor
}

// The modes of a response, the first letter of its chunks' ids.
const (
	modeNew      = 'n' // a request with a new user message: a new assistant message
	modeContinue = 'c' // a request of answers: the last assistant message goes on
	modeReplay   = 'r' // a reconnect without Last-Event-ID: the last assistant message again
)

// eventID is a chunk's SSE id.
func eventID(mode byte, at chat.Cursor) string { return string(mode) + at.String() }

// parseEventID reads an eventID.
func parseEventID(s string) (byte, chat.Cursor, error) {
	if s == "" || (s[0] != modeNew && s[0] != modeContinue && s[0] != modeReplay) {
		return 0, chat.Cursor{}, fmt.Errorf("want an event id of this endpoint")
	}
	at, err := chat.ParseCursor(s[1:])
	return s[0], at, err
}

// from sets the place of the chunks made next: of the stored event se.
func (s *stream) from(se orchestrator.StoredEvent) {
	s.at.Seq, s.at.Idx, s.at.K = se.Seq, se.Index, 0
}

func newStream(w http.ResponseWriter, shown map[string]bool) *stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Vercel-Ai-Ui-Message-Stream", "v1")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if shown == nil {
		shown = map[string]bool{}
	}
	return &stream{SSE: chat.NewSSE(w), shown: shown, mode: modeNew}
}

func (s *stream) emit(chunk map[string]any) {
	id := s.at
	s.at.K++
	if s.skip != nil {
		if !id.After(*s.skip) {
			return
		}
		s.skip = nil
	}
	s.Event(eventID(s.mode, id), chunk)
}

// start sends the start chunk, also on a reconnect, there under the place
// the client resumes from.
func (s *stream) start() {
	id := s.at
	s.at.K++
	if s.skip != nil {
		id = *s.skip
	}
	s.Event(eventID(s.mode, id), map[string]any{"type": "start"})
}

// fail ends the stream with the error chunk.
func (s *stream) fail(code, msg string) {
	s.endStep()
	s.emit(map[string]any{"type": "error", "errorText": code + ": " + msg})
	s.Write("data: [DONE]\n\n")
}

func (s *stream) finish(reason string) {
	s.endStep()
	s.emit(map[string]any{"type": "finish", "finishReason": reason})
	s.Write("data: [DONE]\n\n")
}

func (s *stream) abort(reason string) {
	s.endStep()
	s.emit(map[string]any{"type": "abort", "reason": reason})
	s.Write("data: [DONE]\n\n")
}

func (s *stream) step() {
	if !s.inStep {
		s.emit(map[string]any{"type": "start-step"})
		s.inStep = true
	}
}

func (s *stream) endStep() {
	s.closeText()
	if s.inStep {
		s.emit(map[string]any{"type": "finish-step"})
		s.inStep = false
	}
}

func (s *stream) text(id, delta string) {
	if s.openText != id {
		s.closeText()
		s.step()
		s.emit(map[string]any{"type": "text-start", "id": id})
		s.openText = id
	}
	if delta != "" {
		s.emit(map[string]any{"type": "text-delta", "id": id, "delta": delta})
	}
}

func (s *stream) closeText() {
	if s.openText != "" {
		s.emit(map[string]any{"type": "text-end", "id": s.openText})
		s.openText = ""
	}
}

// toolCall announces a call: its input streamed whole, then available.
// A call settled already is marked providerExecuted, so that the chat does
// not hand it to its onToolCall: it is announced again only to carry its
// result into a new message.
func (s *stream) toolCall(id, name string, args json.RawMessage, settled bool) {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	s.closeText()
	s.step()
	start := map[string]any{"type": "tool-input-start", "toolCallId": id, "toolName": name}
	avail := map[string]any{"type": "tool-input-available", "toolCallId": id, "toolName": name, "input": args}
	if settled {
		start["providerExecuted"], avail["providerExecuted"] = true, true
	}
	s.emit(start)
	s.emit(avail)
	s.shown[id] = true
}

// result sends a call's recorded result in the chunk of its kind.
func (s *stream) result(p agent.Part, c call) {
	if !s.shown[p.ToolCallID] {
		s.toolCall(p.ToolCallID, c.name, c.args, true)
	}
	switch {
	case p.Kind == agent.PartRetryPrompt || p.Outcome == agent.OutcomeFailed:
		s.emit(map[string]any{"type": "tool-output-error", "toolCallId": p.ToolCallID, "errorText": resultText(p)})
	case p.Outcome == agent.OutcomeDenied:
		s.emit(map[string]any{"type": "tool-output-denied", "toolCallId": p.ToolCallID})
	default:
		s.emit(map[string]any{"type": "tool-output-available", "toolCallId": p.ToolCallID, "output": outputOf(p)})
	}
}

// follow streams the events of the runs this request started (those not
// in p.oldRuns) until the conversation waits for the user (approvals:
// tool-approval-request chunks; frontend calls: their tool input) or
// ends. Pauses on workers' calls alone are streamed through: the
// follow-up their results start continues the same message. A replay
// streams the stored events of the runs followed before it settles.
func (h *handler) follow(ctx context.Context, s *stream, convID string, p *plan, replay bool) {
	if !replay && h.settle(ctx, s, convID, p, "") {
		return
	}
	defer s.KeepAlive(h.KeepAlive)()
	f := follower{s: s, runs: map[string]int{}, calls: map[string]call{}}
	for id, c := range p.known.calls {
		f.calls[id] = c
	}
	for se, cancelled := range chat.Follow(ctx, h.e, convID, p.after, p.start, p.oldRuns) {
		s.from(se)
		ev := se.Event
		if cancelled {
			s.abort("the conversation was cancelled")
			return
		}
		switch ev.Type {
		case wire.EventRunCompleted:
			s.finish("stop")
			return
		case wire.EventRunFailed:
			var d wire.RunFailed
			_ = json.Unmarshal(ev.Data, &d)
			s.fail("run_failed", d.Error)
			return
		case wire.EventRunPaused:
			s.closeText()
			// The state may be ahead of the events: a pause whose
			// follow-up already runs is streamed through.
			if h.settle(ctx, s, convID, p, ev.RunID) {
				return
			}
		default:
			f.agentEvent(ev)
		}
	}
}

// settle ends the stream if the conversation waits for the user or is
// over. Before any new run (paused "") a conversation that will run again
// (a prompt given, a batch completed) is left to its events; after run
// paused, only that run's own pause is settled here.
func (h *handler) settle(ctx context.Context, s *stream, convID string, p *plan, paused string) bool {
	c, err := h.e.Conversation(ctx, convID)
	if err != nil {
		s.fail("internal", "conversation: "+err.Error())
		return true
	}
	if !chat.Settles(c, p.oldRuns, p.prompt, paused) {
		return false
	}
	switch c.Status {
	case conversation.StatusCompleted:
		s.finish("stop")
		return true
	case conversation.StatusFailed:
		s.fail("run_failed", c.Error)
		return true
	case conversation.StatusCancelled:
		s.abort("the conversation was cancelled")
		return true
	case conversation.StatusPaused:
		w := waitingOf(c)
		if len(w.approvals) == 0 && len(w.frontend) == 0 {
			return false
		}
		for _, pc := range c.Batch.Calls {
			if pc.Reply != nil {
				continue
			}
			if w.approvals[pc.ToolCallID] == nil && w.frontend[pc.ToolCallID] == nil {
				continue
			}
			if !s.shown[pc.ToolCallID] {
				s.toolCall(pc.ToolCallID, pc.ToolName, pc.Args, false)
			}
			if pc.Kind == deferred.KindApproval {
				s.emit(map[string]any{"type": "tool-approval-request", "toolCallId": pc.ToolCallID,
					"approvalId": approvalID(pc.ToolCallID, pc.ArgsDigest), "reason": fmt.Sprintf("Allow %s with %s?", pc.ToolName, pc.Args),
					"approvalDescriptor": descriptorOf(pc)})
			}
		}
		s.finish("tool-calls")
		return true
	}
	return false
}

// waitingOf is what c's batch waits for from the user: its approvals and
// its frontend calls without an answer.
func waitingOf(c *conversation.State) waiting {
	w := waiting{approvals: map[string]*conversation.PendingCall{}, frontend: map[string]*conversation.PendingCall{}}
	if c.Batch == nil || (c.Status != conversation.StatusPaused && c.Status != conversation.StatusRunning) {
		return w
	}
	for _, pc := range c.Batch.Calls {
		switch {
		case pc.Reply != nil:
		case pc.Kind == deferred.KindApproval:
			w.approvals[pc.ToolCallID] = pc
		case pc.Executor == orchestrator.ExecutorFrontend:
			w.frontend[pc.ToolCallID] = pc
		}
	}
	return w
}

// follower turns the agent events of the runs followed into chunks.
type follower struct {
	s *stream
	// runs counts the model responses of each run so far.
	runs map[string]int
	// calls are the tool calls made, by id: the client has seen their
	// input; a follow-up that settles one sends only its result.
	calls map[string]call
	// streamed marks the runs whose current response streamed text.
	streamed map[string]bool
	// settled says results were sent: the next model response is the
	// next step.
	settled bool
}

// agentData is an agent event's data: {"kind", <its one field>}.
type agentData struct {
	Delta   string         `json:"delta"`
	Message *agent.Message `json:"message"`
	Part    *agent.Part    `json:"part"`
}

func (f *follower) agentEvent(ev wire.Event) {
	var d agentData
	if len(ev.Data) > 0 && json.Unmarshal(ev.Data, &d) != nil {
		return
	}
	if f.streamed == nil {
		f.streamed = map[string]bool{}
	}
	id := responseID(ev.RunID, f.runs[ev.RunID])
	switch ev.Type {
	case wire.EventTextDelta:
		if d.Delta != "" {
			f.nextStep()
			f.s.text(id, d.Delta)
			f.streamed[ev.RunID] = true
		}
	case wire.EventModelResponse:
		f.nextStep()
		if d.Message != nil && !f.streamed[ev.RunID] {
			var text string
			for _, p := range d.Message.Parts {
				if p.Kind == agent.PartText {
					text += p.Content
				}
			}
			if text != "" {
				f.s.text(id, text)
			}
		}
		f.s.closeText()
		f.streamed[ev.RunID] = false
		f.runs[ev.RunID]++
	case wire.EventToolCall:
		if d.Part == nil {
			return
		}
		if _, seen := f.calls[d.Part.ToolCallID]; seen {
			return
		}
		f.calls[d.Part.ToolCallID] = call{name: d.Part.ToolName, args: d.Part.Args}
		f.nextStep()
		f.s.toolCall(d.Part.ToolCallID, d.Part.ToolName, d.Part.Args, false)
	case wire.EventToolResult:
		if d.Part == nil {
			return
		}
		f.s.result(*d.Part, f.calls[d.Part.ToolCallID])
		f.settled = true
	}
}

// nextStep ends the step whose calls were settled: what the model says
// after their results is the next step.
func (f *follower) nextStep() {
	if f.settled {
		f.s.endStep()
		f.settled = false
	}
}

// descriptorOf is an approval request's approvalDescriptor (opaque to the
// chat, kept as part.approval.descriptor): the call's deadline and its
// approval metadata.
func descriptorOf(pc *conversation.PendingCall) map[string]any {
	d := map[string]any{"expiresAt": pc.Deadline.UTC().Format(time.RFC3339Nano)}
	if len(pc.Metadata) > 0 && pc.Metadata[0] == '{' {
		d["metadata"] = pc.Metadata
	}
	return d
}
