package agui

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

// stream writes one AG-UI run as Server-Sent Events, each under the id of
// its place in the run (chat.Cursor).
type stream struct {
	*chat.SSE
	in      RunAgentInput
	openMsg string // the text message open, if any
	// at is the place of the next event.
	at chat.Cursor
	// skip, on a reconnect, is the place of the last event the client
	// has: the events up to it are made again, to know the state there,
	// but not sent.
	skip *chat.Cursor
	// openText and openCall are the TEXT_MESSAGE_START and TOOL_CALL_START
	// of the message and the call open at the last event made: a
	// reconnect that resumes inside one opens it again, as the client
	// checks that a stream opens what it continues.
	openText, openCall map[string]any
}

func newStream(w http.ResponseWriter, in RunAgentInput) *stream {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &stream{SSE: chat.NewSSE(w), in: in}
}

// from sets the place of the events made next: of the stored event se.
func (s *stream) from(se orchestrator.StoredEvent) {
	s.at.Seq, s.at.Idx, s.at.K = se.Seq, se.Index, 0
}

func (s *stream) emit(ev map[string]any) {
	ev["timestamp"] = time.Now().UnixMilli()
	id := s.at
	s.at.K++
	if s.skip != nil {
		if !id.After(*s.skip) {
			s.track(ev)
			return
		}
		s.skip = nil
		if s.openText != nil && ev["type"] != evTextStart {
			s.Data(s.openText)
		}
		if s.openCall != nil && ev["type"] != evToolCallStart {
			s.Data(s.openCall)
		}
	}
	s.track(ev)
	s.Event(id.String(), ev)
}

func (s *stream) track(ev map[string]any) {
	switch ev["type"] {
	case evTextStart:
		s.openText = ev
	case evTextEnd:
		s.openText = nil
	case evToolCallStart:
		s.openCall = ev
	case evToolCallEnd:
		s.openCall = nil
	}
}

// started sends RUN_STARTED, also on a reconnect (the client's stream
// starts with it), there under the place the client resumes from.
func (s *stream) started() {
	id := s.at
	s.at.K++
	if s.skip != nil {
		id = *s.skip
	}
	s.Event(id.String(), map[string]any{"type": evRunStarted, "threadId": s.in.ThreadID, "runId": s.in.RunID, "protocolVersion": ProtocolVersion, "timestamp": time.Now().UnixMilli()})
}

// fail ends the run with RUN_ERROR (alone, when the run never began).
func (s *stream) fail(code, msg string) {
	s.closeText()
	s.emit(map[string]any{"type": evRunError, "message": msg, "code": code})
}

func (s *stream) finish(o outcome, result any) {
	s.closeText()
	ev := map[string]any{"type": evRunFinished, "threadId": s.in.ThreadID, "runId": s.in.RunID, "outcome": o}
	if result != nil {
		ev["result"] = result
	}
	s.emit(ev)
}

func (s *stream) text(id, delta string) {
	if s.openMsg != id {
		s.closeText()
		s.emit(map[string]any{"type": evTextStart, "messageId": id, "role": "assistant"})
		s.openMsg = id
	}
	if delta != "" {
		s.emit(map[string]any{"type": evTextContent, "messageId": id, "delta": delta})
	}
}

func (s *stream) closeText() {
	if s.openMsg != "" {
		s.emit(map[string]any{"type": evTextEnd, "messageId": s.openMsg})
		s.openMsg = ""
	}
}

// follow streams the events of the runs this input started (the runs not
// in p.oldRuns) until the conversation waits for the user (an approval:
// the interrupt outcome; a frontend call: success naming it) or ends.
// Pauses on workers' calls alone are streamed through: the follow-up that
// their results start belongs to the same AG-UI run.
func (h *handler) follow(ctx context.Context, s *stream, threadID string, p *plan) {
	if done := h.settle(ctx, s, threadID, p, ""); done {
		return
	}
	defer s.KeepAlive(h.KeepAlive)()
	f := follower{s: s, runs: map[string]int{}, called: map[string]bool{}}
	for id := range p.known.calls {
		f.called[id] = true
	}
	for se, cancelled := range chat.Follow(ctx, h.e, threadID, p.base, p.start, p.oldRuns) {
		s.from(se)
		ev := se.Event
		if cancelled {
			s.finish(outcome{Type: "cancelled"}, nil)
			return
		}
		switch ev.Type {
		case wire.EventRunCompleted:
			var d wire.RunCompleted
			_ = json.Unmarshal(ev.Data, &d)
			s.finish(outcome{Type: "success"}, d.Output)
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
			if h.settle(ctx, s, threadID, p, ev.RunID) {
				return
			}
		default:
			f.agentEvent(ev)
		}
	}
}

// settle ends the run if the conversation waits for the user or is over.
// Before any new run (paused "") a conversation that will run again (a
// prompt given, a batch completed) is left to its events; after run paused
// paused, only that run's own pause is settled here.
func (h *handler) settle(ctx context.Context, s *stream, threadID string, p *plan, paused string) bool {
	c, err := h.e.Conversation(ctx, threadID)
	if err != nil {
		s.fail("internal", "conversation: "+err.Error())
		return true
	}
	if !chat.Settles(c, p.oldRuns, p.prompt, paused) {
		return false
	}
	switch c.Status {
	case conversation.StatusCompleted:
		s.finish(outcome{Type: "success"}, c.Output)
		return true
	case conversation.StatusFailed:
		s.fail("run_failed", c.Error)
		return true
	case conversation.StatusCancelled:
		s.finish(outcome{Type: "cancelled"}, nil)
		return true
	case conversation.StatusPaused:
		var (
			interrupts []Interrupt
			frontend   []string
		)
		for _, pc := range waiting(c) {
			switch {
			case pc.Kind == deferred.KindApproval:
				interrupts = append(interrupts, interruptOf(pc))
			case pc.Executor == orchestrator.ExecutorFrontend:
				frontend = append(frontend, pc.ToolCallID)
			}
		}
		if len(interrupts) > 0 {
			s.finish(outcome{Type: "interrupt", Interrupts: interrupts}, nil)
			return true
		}
		if len(frontend) > 0 {
			s.finish(outcome{Type: "success", PendingToolCallIDs: frontend}, nil)
			return true
		}
	}
	return false
}

func interruptOf(pc *conversation.PendingCall) Interrupt {
	in := Interrupt{
		ID: interruptID(pc.ToolCallID, pc.ArgsDigest), Reason: "tool_call", ToolCallID: pc.ToolCallID,
		Message:        fmt.Sprintf("Allow %s with %s?", pc.ToolName, pc.Args),
		ResponseSchema: responseSchema, ExpiresAt: pc.Deadline.UTC().Format(time.RFC3339Nano),
	}
	if len(pc.Metadata) > 0 && pc.Metadata[0] == '{' {
		in.Metadata = pc.Metadata
	}
	return in
}

// follower turns the agent events of the runs followed into AG-UI events.
type follower struct {
	s *stream
	// runs counts the model responses of each run so far.
	runs map[string]int
	// called are the tool calls the client has seen started: a follow-up
	// that settles one reports only its result.
	called map[string]bool
	// streamed marks the runs whose current response streamed text.
	streamed map[string]bool
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
			f.s.text(id, d.Delta)
			f.streamed[ev.RunID] = true
		}
	case wire.EventModelResponse:
		if d.Message != nil && !f.streamed[ev.RunID] {
			for _, p := range d.Message.Parts {
				if p.Kind == agent.PartText && p.Content != "" {
					f.s.text(id, p.Content)
				}
			}
		}
		f.s.closeText()
		f.streamed[ev.RunID] = false
		f.runs[ev.RunID]++
	case wire.EventToolCall:
		if d.Part == nil || f.called[d.Part.ToolCallID] {
			return
		}
		f.called[d.Part.ToolCallID] = true
		parent := responseID(ev.RunID, max(f.runs[ev.RunID]-1, 0))
		args := string(d.Part.Args)
		if args == "" {
			args = "{}"
		}
		f.s.emit(map[string]any{"type": evToolCallStart, "toolCallId": d.Part.ToolCallID, "toolCallName": d.Part.ToolName, "parentMessageId": parent})
		f.s.emit(map[string]any{"type": evToolCallArgs, "toolCallId": d.Part.ToolCallID, "delta": args})
		f.s.emit(map[string]any{"type": evToolCallEnd, "toolCallId": d.Part.ToolCallID})
	case wire.EventToolResult:
		if d.Part == nil {
			return
		}
		f.s.emit(map[string]any{"type": evToolCallResult, "messageId": resultID(ev.RunID, d.Part.ToolCallID),
			"toolCallId": d.Part.ToolCallID, "content": resultText(*d.Part), "role": "tool"})
	}
}
