package agui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/chat"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/web"
)

// maxInputBytes bounds a RunAgentInput: the client sends its whole
// history, which grows with the conversation.
const maxInputBytes = 8 << 20

// Engine is what the adapter needs of the orchestrator.
type Engine = chat.Engine

// Config configures the adapter.
type Config = chat.Config

// Handler serves POST /v1/agui. Mount it behind the API's authentication
// (api.Config.Routes), which names the caller (api.CallerOf): the answers it
// gives are that caller's.
func Handler(e Engine, cfg Config) http.Handler {
	return &handler{e: e, Config: cfg.WithDefaults()}
}

type handler struct {
	e Engine
	Config
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !web.RequireJSON(w, r) {
		return
	}
	var in RunAgentInput
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxInputBytes)).Decode(&in); err != nil {
		web.WriteError(w, http.StatusBadRequest, "body: want a RunAgentInput: "+strings.TrimPrefix(err.Error(), "json: "))
		return
	}
	if in.RunID == "" {
		web.WriteError(w, http.StatusBadRequest, "runId: required")
		return
	}
	var resume *chat.Cursor
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		c, err := chat.ParseCursor(v)
		if err != nil {
			web.WriteError(w, http.StatusBadRequest, fmt.Sprintf("Last-Event-ID %q: %v", v, err))
			return
		}
		resume = &c
	}
	if err := web.Stream(w); err != nil {
		web.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s := newStream(w, in)
	ctx := r.Context()
	if in.ThreadID == "" {
		s.fail("invalid_thread", "threadId: required")
		return
	}
	if resume != nil {
		h.reconnect(ctx, s, in, *resume)
		return
	}
	p, err := h.prepare(ctx, in)
	if err != nil {
		var rf *chat.Refusal
		if errors.As(err, &rf) {
			h.record(ctx, in, rf.Forged)
			s.fail(rf.Code, rf.Msg)
		} else {
			h.Logger.WarnContext(ctx, "agui: prepare", slog.String("thread", in.ThreadID), slog.String("error", err.Error()))
			s.fail("internal", "internal error")
		}
		return
	}
	if p.base, err = h.e.LastEventSeq(ctx); err != nil {
		h.Logger.WarnContext(ctx, "agui: last event", slog.String("thread", in.ThreadID), slog.String("error", err.Error()))
		s.fail("internal", "internal error")
		return
	}
	s.at.Base, s.at.Runs = p.base, len(p.oldRuns)
	if err := h.apply(ctx, in, p); err != nil {
		s.fail(errCode(err), err.Error())
		return
	}
	s.started()
	h.follow(ctx, s, ConversationID(in.ThreadID), p)
}

// reconnect serves an input sent again with the Last-Event-ID of the run
// it started (HttpAgent.runAgent with the same runId): nothing of it is
// read or applied, the run's stream goes on after that event. It starts
// with RUN_STARTED and opens again the message or tool call the client
// has a part of; every other event the client has is left out.
func (h *handler) reconnect(ctx context.Context, s *stream, in RunAgentInput, at chat.Cursor) {
	c, err := h.e.Conversation(ctx, ConversationID(in.ThreadID))
	switch {
	case errors.Is(err, orchestrator.ErrNotFound):
		s.fail("reconnect_refused", "Last-Event-ID: thread "+in.ThreadID+" has no run")
		return
	case err != nil:
		h.Logger.WarnContext(ctx, "agui: reconnect", slog.String("thread", in.ThreadID), slog.String("error", err.Error()))
		s.fail("internal", "internal error")
		return
	case at.Runs > len(c.Runs):
		s.fail("reconnect_refused", "Last-Event-ID: not an event of thread "+in.ThreadID)
		return
	}
	p := &plan{oldRuns: map[string]bool{}, base: at.Base}
	for _, r := range c.Runs[:at.Runs] {
		p.oldRuns[r.RunID] = true
	}
	// The calls the run's stream started from: made by the runs before.
	p.known.calls = map[string]bool{}
	for _, m := range c.History {
		if !p.oldRuns[m.RunID] {
			continue
		}
		for _, part := range m.Parts {
			if part.Kind == agent.PartToolCall {
				p.known.calls[part.ToolCallID] = true
			}
		}
	}
	s.at = chat.Cursor{Base: at.Base, Runs: at.Runs}
	s.skip = &at
	s.started()
	h.follow(ctx, s, c.ID, p)
}

// ConversationID is the conversation of an AG-UI thread: derived from the
// thread's id (any string the client chose), in the form of the ids
// toolgate gives ("c" and hex), which its run ids embed.
func ConversationID(threadID string) string {
	return chat.ConversationID("agui-thread", threadID)
}

// plan is what an input asks for once checked: nothing of it is applied
// before every part is known to be acceptable.
type plan struct {
	conv      *conversation.State // nil: a new thread
	known     transcript
	prompt    string
	agent     string
	decisions []orchestrator.Answer
	results   []orchestrator.Answer
	// oldRuns are the conversation's runs before this input: their
	// events were streamed by earlier requests.
	oldRuns map[string]bool
	// start is when the input came: a cancel after it ends the run.
	start time.Time
	// base is the last event stored before the input was applied: the
	// events of its runs come after it.
	base uint64
}

// prepare checks the input against the conversation: the history the
// client sends, the resume entries (every open interrupt answered, each
// once, for its call as issued, before its deadline) and the tool
// messages (each for a frontend call still waiting).
func (h *handler) prepare(ctx context.Context, in RunAgentInput) (*plan, error) {
	p := &plan{oldRuns: map[string]bool{}, start: h.Clock()}
	agent, err := h.agentOf(in)
	if err != nil {
		return nil, err
	}
	p.agent = agent
	c, err := h.e.Conversation(ctx, ConversationID(in.ThreadID))
	switch {
	case errors.Is(err, orchestrator.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		p.conv = c
	}
	approvals, frontend := map[string]*conversation.PendingCall{}, map[string]bool{}
	if c != nil {
		p.known = transcriptOf(c)
		for _, r := range c.Runs {
			p.oldRuns[r.RunID] = true
		}
		if c.Status == conversation.StatusPaused || c.Status == conversation.StatusRunning {
			for _, pc := range waiting(c) {
				if pc.Kind == deferred.KindApproval {
					approvals[pc.ToolCallID] = pc
				} else if pc.Executor == orchestrator.ExecutorFrontend {
					frontend[pc.ToolCallID] = true
				}
			}
		}
	} else {
		p.known = transcript{msgs: map[string]sent{}, calls: map[string]bool{}}
	}
	rd, err := read(in.Messages, p.known, frontend)
	if err != nil {
		return nil, chat.Refuse("history_refused", "%v", err)
	}
	p.prompt = rd.prompt
	now := h.Clock()
	answered := map[string]bool{}
	for _, e := range in.Resume {
		callID, digest, _ := strings.Cut(e.InterruptID, ":")
		forged := &orchestrator.Answer{ToolCallID: callID, Decision: &orchestrator.AnswerDecision{ArgsDigest: digest, Approved: true}}
		pc, ok := approvals[callID]
		if !ok {
			rf := chat.Refuse("resume_refused", "resume for interrupt %q: no such interrupt is open on thread %s", e.InterruptID, in.ThreadID)
			rf.Forged = forged
			return nil, rf
		}
		if answered[callID] {
			return nil, chat.Refuse("resume_refused", "interrupt %q is answered twice", e.InterruptID)
		}
		answered[callID] = true
		if digest != pc.ArgsDigest {
			rf := chat.Refuse("resume_refused", "resume for interrupt %q: the call's args are not those it was issued with", e.InterruptID)
			rf.Forged = forged
			return nil, rf
		}
		if !now.Before(pc.Deadline) {
			return nil, chat.Refuse("interrupt_expired", "interrupt %q expired at %s", e.InterruptID, pc.Deadline.UTC().Format(time.RFC3339))
		}
		a, err := decisionOf(e, pc)
		if err != nil {
			return nil, err
		}
		a.ToolCallID = callID
		p.decisions = append(p.decisions, a)
	}
	var open []string
	for id := range approvals {
		if !answered[id] {
			open = append(open, id)
		}
	}
	if len(open) > 0 {
		slices.Sort(open)
		return nil, chat.Refuse("resume_required", "thread %s has open interrupts for calls %s: a resume must answer every one", in.ThreadID, strings.Join(open, ", "))
	}
	seen := map[string]bool{}
	for _, m := range rd.answers {
		if seen[m.ToolCallID] {
			return nil, chat.Refuse("history_refused", "call %s is answered twice", m.ToolCallID)
		}
		seen[m.ToolCallID] = true
		res, err := orchestrator.ResultOf(answerJSON(m))
		if err != nil {
			return nil, chat.Refuse("history_refused", "tool message %s: %v", m.ID, err)
		}
		p.results = append(p.results, orchestrator.Answer{ToolCallID: m.ToolCallID, Result: res})
	}
	if p.prompt == "" && len(p.decisions) == 0 && len(p.results) == 0 && c == nil {
		return nil, chat.Refuse("no_input", "a new thread needs a user message")
	}
	return p, nil
}

// waiting is the calls of c's batch without an answer.
func waiting(c *conversation.State) []*conversation.PendingCall {
	if c.Batch == nil {
		return nil
	}
	var out []*conversation.PendingCall
	for _, pc := range c.Batch.Calls {
		if pc.Reply == nil {
			out = append(out, pc)
		}
	}
	return out
}

func decisionOf(e ResumeEntry, pc *conversation.PendingCall) (orchestrator.Answer, error) {
	d := &orchestrator.AnswerDecision{ArgsDigest: pc.ArgsDigest}
	switch e.Status {
	case "cancelled":
		d.Message = "The user dismissed the approval."
		return orchestrator.Answer{Decision: d}, nil
	case "resolved":
	default:
		return orchestrator.Answer{}, chat.Refuse("resume_refused", "resume for interrupt %q: status %q is not resolved or cancelled", e.InterruptID, e.Status)
	}
	var pl approvalPayload
	if err := json.Unmarshal(e.Payload, &pl); err != nil || pl.Approved == nil {
		return orchestrator.Answer{}, chat.Refuse("resume_refused", "resume for interrupt %q: payload: want {\"approved\": true|false, ...}", e.InterruptID)
	}
	if len(pl.Args) > 0 {
		sum, err := deferred.ArgsDigest(pl.Args)
		if err != nil || sum != pc.ArgsDigest {
			return orchestrator.Answer{}, chat.Refuse("resume_refused", "resume for interrupt %q: payload.args are not the args the call was issued with", e.InterruptID)
		}
	}
	d.Approved, d.Message, d.Metadata = *pl.Approved, pl.Message, pl.Metadata
	if len(pl.EditedArgs) > 0 && string(pl.EditedArgs) != "null" {
		if !d.Approved {
			return orchestrator.Answer{}, chat.Refuse("resume_refused", "resume for interrupt %q: editedArgs on a denial", e.InterruptID)
		}
		d.OverrideArgs = pl.EditedArgs
	}
	return orchestrator.Answer{Decision: d}, nil
}

// agentOf is the agent forwardedProps.agent names, else the only one.
func (h *handler) agentOf(in RunAgentInput) (string, error) {
	var fp struct {
		Agent string `json:"agent"`
	}
	if len(in.ForwardedProps) > 0 {
		_ = json.Unmarshal(in.ForwardedProps, &fp)
	}
	if fp.Agent != "" {
		return fp.Agent, nil
	}
	if names := h.e.Agents(); len(names) == 1 {
		return names[0], nil
	}
	return "", nil
}

// apply gives the prompt first (a paused conversation keeps it for the
// follow-up run the answers start), then the answers. Every answer was
// checked against the state read; one the orchestrator refuses all the
// same (another answer came first) ends the run with RUN_ERROR.
func (h *handler) apply(ctx context.Context, in RunAgentInput, p *plan) error {
	caller := api.CallerOf(ctx)
	if p.prompt != "" {
		callerJSON, _ := json.Marshal(map[string]string{"user": caller.Name})
		// A new thread is a new conversation of the thread's id; the key
		// makes a retried input (same runId) start it once.
		req := orchestrator.StartRequest{
			Prompt: p.prompt, Agent: p.agent, Caller: callerJSON,
			IdempotencyKey: "agui-" + in.RunID,
			// The tools the input declares are the thread's from now on.
			FrontendTools: make([]agent.ToolDef, 0, len(in.Tools)),
		}
		for _, t := range in.Tools {
			req.FrontendTools = append(req.FrontendTools, agent.ToolDef{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		}
		if p.conv == nil {
			req.NewConversationID = ConversationID(in.ThreadID)
		} else {
			req.ConversationID = ConversationID(in.ThreadID)
		}
		_, err := h.e.StartRunWith(ctx, req)
		if err != nil {
			return err
		}
	}
	for _, a := range append(p.decisions, p.results...) {
		a.ConversationID, a.By, a.Identified = ConversationID(in.ThreadID), caller.Name, caller.User
		if err := h.e.Answer(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// record hands a forged answer to the orchestrator, which refuses it and
// records the refusal; its verdict is not the client's business beyond
// the RUN_ERROR it gets.
func (h *handler) record(ctx context.Context, in RunAgentInput, a *orchestrator.Answer) {
	if a == nil {
		return
	}
	caller := api.CallerOf(ctx)
	a.ConversationID, a.By, a.Identified = ConversationID(in.ThreadID), caller.Name, caller.User
	if err := h.e.Answer(ctx, *a); err == nil {
		// Refused by the adapter for what the orchestrator also checks:
		// never expected, and worth knowing.
		h.Logger.ErrorContext(ctx, "agui: a resume the adapter refused was applied", slog.String("thread", in.ThreadID), slog.String("tool_call_id", a.ToolCallID))
	}
}

func errCode(err error) string {
	var ae *orchestrator.AnswerError
	if errors.As(err, &ae) {
		return "answer_" + string(ae.Code)
	}
	var ce *conversation.ConflictError
	if errors.As(err, &ce) {
		return "conflict"
	}
	var be *orchestrator.BadRequestError
	if errors.As(err, &be) {
		return "bad_request"
	}
	return "refused"
}
