package aisdk

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
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/web"
)

// maxRequestBytes bounds a request: the chat sends its whole history,
// which grows with the conversation.
const maxRequestBytes = 8 << 20

// Engine is what the adapter needs of the orchestrator.
type Engine = chat.Engine

// Config configures the adapter.
type Config = chat.Config

// Handler serves POST /v1/ai-sdk/chat. Mount it behind the API's
// authentication (api.Config.Routes), which names the caller
// (api.CallerOf): the answers it gives are that caller's.
func Handler(e Engine, cfg Config) http.Handler {
	return &handler{e: e, Config: cfg.WithDefaults()}
}

type handler struct {
	e Engine
	Config
}

// ConversationID is the conversation of a chat: derived from the chat's
// id (any string the client chose), in the form of the ids toolgate gives
// ("c" and hex), which its run ids embed.
func ConversationID(chatID string) string {
	return chat.ConversationID("ai-sdk-chat", chatID)
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		h.resume(w, r)
		return
	}
	if !web.RequireJSON(w, r) {
		return
	}
	var req Request
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequestBytes)).Decode(&req); err != nil {
		web.WriteError(w, http.StatusBadRequest, "body: want the chat's request: "+strings.TrimPrefix(err.Error(), "json: "))
		return
	}
	if err := web.Stream(w); err != nil {
		web.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	ctx := r.Context()
	p, err := h.prepare(ctx, req)
	if err != nil {
		s := newStream(w, nil)
		var rf *chat.Refusal
		if errors.As(err, &rf) {
			h.record(ctx, req, rf.Forged)
			s.fail(rf.Code, rf.Msg)
		} else {
			h.Logger.WarnContext(ctx, "aisdk: prepare", slog.String("chat", req.ID), slog.String("error", err.Error()))
			s.fail("internal", "internal error")
		}
		return
	}
	s := newStream(w, p.seen)
	if p.prompt == "" {
		s.mode = modeContinue
	}
	if p.after, err = h.e.LastEventSeq(ctx); err != nil {
		h.Logger.WarnContext(ctx, "aisdk: last event", slog.String("chat", req.ID), slog.String("error", err.Error()))
		s.fail("internal", "internal error")
		return
	}
	s.at.Base, s.at.Runs = p.after, len(p.oldRuns)
	if err := h.apply(ctx, req, p); err != nil {
		s.fail(errCode(err), err.Error())
		return
	}
	s.start()
	h.follow(ctx, s, ConversationID(req.ID), p, false)
}

// resume serves GET /v1/ai-sdk/chat/{id}/stream, where the chat's
// transport reconnects (resumeStream). Without Last-Event-ID, a replay of
// the chat's last assistant message (the runs since the last prompt, as
// the transport expects by default), followed live until the conversation
// waits for the user or ends; 204 for a chat without a run. With the id of
// the last chunk the client has, the response it came from goes on after
// it (for a transport made with resumeStreamIsReplay: false, whose chat
// kept the message's state). It reads nothing from the client and applies
// nothing.
func (h *handler) resume(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var (
		mode byte
		at   *chat.Cursor
	)
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		m, c, err := parseEventID(v)
		if err != nil {
			web.WriteError(w, http.StatusBadRequest, fmt.Sprintf("Last-Event-ID %q: %v", v, err))
			return
		}
		mode, at = m, &c
	}
	c, err := h.e.Conversation(ctx, ConversationID(r.PathValue("id")))
	if errors.Is(err, orchestrator.ErrNotFound) || err == nil && len(c.Runs) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err != nil {
		h.Logger.WarnContext(ctx, "aisdk: resume", slog.String("chat", r.PathValue("id")), slog.String("error", err.Error()))
		web.WriteError(w, http.StatusInternalServerError, "internal error")
		return
	}
	if at != nil && at.Runs > len(c.Runs) {
		web.WriteError(w, http.StatusBadRequest, fmt.Sprintf("Last-Event-ID: not an event of chat %s", r.PathValue("id")))
		return
	}
	if err := web.Stream(w); err != nil {
		web.WriteError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if at != nil {
		h.reconnect(ctx, w, c, mode, *at)
		return
	}
	p := &plan{oldRuns: map[string]bool{}, start: h.Clock(), known: newTranscript()}
	last := 0
	for i, run := range c.Runs {
		if run.Prompt != "" {
			last = i
		}
	}
	for _, run := range c.Runs[:last] {
		p.oldRuns[run.RunID] = true
	}
	s := newStream(w, nil)
	s.mode, s.at.Runs = modeReplay, last
	s.start()
	if c.Status == conversation.StatusCancelled {
		// Its cancel is no event after this request: the replay would
		// wait for one.
		s.abort("the conversation was cancelled")
		return
	}
	h.follow(ctx, s, c.ID, p, true)
}

// reconnect goes on with the response whose chunk at the client has: its
// chunks are made again as that response made them (its runs, the calls
// its client had, the calls its message showed) and those up to at left
// out.
func (h *handler) reconnect(ctx context.Context, w http.ResponseWriter, c *conversation.State, mode byte, at chat.Cursor) {
	p := &plan{oldRuns: map[string]bool{}, after: at.Base, known: newTranscript()}
	last := 0
	for i, run := range c.Runs[:at.Runs] {
		p.oldRuns[run.RunID] = true
		if run.Prompt != "" {
			last = i
		}
	}
	shown := map[string]bool{}
	if mode == modeReplay {
		// A replay reads the log from its start; only a cancel after
		// this request ends it, as one before would have ended the first.
		p.start = h.Clock()
	}
	for _, m := range c.History {
		if !p.oldRuns[m.RunID] || mode == modeReplay {
			continue
		}
		lastMessage := slices.ContainsFunc(c.Runs[last:at.Runs], func(r *conversation.RunRecord) bool { return r.RunID == m.RunID })
		for _, part := range m.Parts {
			switch part.Kind {
			case agent.PartToolCall:
				p.known.calls[part.ToolCallID] = call{name: part.ToolName, args: part.Args}
			case agent.PartToolReturn, agent.PartRetryPrompt:
			default:
				continue
			}
			if mode == modeContinue && lastMessage {
				// The calls of the message the request went on with.
				shown[part.ToolCallID] = true
			}
		}
	}
	s := newStream(w, shown)
	s.mode, s.at, s.skip = mode, chat.Cursor{Base: at.Base, Runs: at.Runs}, &at
	s.start()
	h.follow(ctx, s, c.ID, p, mode == modeReplay)
}

// plan is what a request asks for once checked: nothing of it is applied
// before every part is known to be acceptable.
type plan struct {
	conv      *conversation.State // nil: a new chat
	known     transcript
	prompt    string
	promptID  string
	agent     string
	decisions []orchestrator.Answer
	results   []orchestrator.Answer
	seen      map[string]bool
	// oldRuns are the conversation's runs before this request: their
	// events were streamed by earlier requests.
	oldRuns map[string]bool
	// start is when the request came: a cancel after it ends the stream.
	start time.Time
	// after is the last event stored before the request was applied: its
	// runs' events come after it. 0 reads the conversation's log from its
	// start.
	after uint64
}

// prepare checks the request against the conversation: the history the
// client sends, its approval responses (every open approval answered,
// each once, as requested, before its deadline) and its tool outputs
// (each for a frontend call still waiting).
func (h *handler) prepare(ctx context.Context, req Request) (*plan, error) {
	if req.ID == "" {
		return nil, chat.Refuse("invalid_chat", "id: required")
	}
	if req.Trigger != "" && req.Trigger != "submit-message" {
		return nil, chat.Refuse("unsupported_trigger", "trigger %q: the server's log is the history, a response cannot be regenerated", req.Trigger)
	}
	p := &plan{oldRuns: map[string]bool{}, start: h.Clock(), known: newTranscript(), agent: req.Agent}
	if p.agent == "" {
		if names := h.e.Agents(); len(names) == 1 {
			p.agent = names[0]
		}
	}
	convID := ConversationID(req.ID)
	c, err := h.e.Conversation(ctx, convID)
	switch {
	case errors.Is(err, orchestrator.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		p.conv = c
	}
	w := waiting{approvals: map[string]*conversation.PendingCall{}, frontend: map[string]*conversation.PendingCall{}}
	if c != nil {
		p.known = transcriptOf(c)
		for _, r := range c.Runs {
			p.oldRuns[r.RunID] = true
		}
		w = waitingOf(c)
	}
	rd, err := read(req.Messages, p.known, w)
	if err != nil {
		rf := chat.Refuse("history_refused", "%v", err)
		rf.Forged = forgedOf(err)
		return nil, rf
	}
	p.prompt, p.promptID, p.seen = rd.prompt, rd.promptID, rd.seen
	if p.prompt != "" {
		// The new user message starts a new assistant message.
		p.seen = nil
	}
	now := h.Clock()
	var open []string
	for id, pc := range w.approvals {
		part, ok := rd.decisions[id]
		if !ok {
			open = append(open, id)
			continue
		}
		if !now.Before(pc.Deadline) {
			return nil, chat.Refuse("approval_expired", "the approval of call %s expired at %s", id, pc.Deadline.UTC().Format(time.RFC3339))
		}
		d := &orchestrator.AnswerDecision{ArgsDigest: pc.ArgsDigest, Approved: *part.Approval.Approved}
		if !d.Approved {
			// The reason addToolApprovalResponse gives a denial tells the
			// model why.
			d.Message = part.Approval.Reason
		}
		p.decisions = append(p.decisions, orchestrator.Answer{ToolCallID: id, Decision: d})
	}
	if len(open) > 0 {
		slices.Sort(open)
		return nil, chat.Refuse("approval_required", "chat %s waits for the approval of calls %s: a request must answer every one", req.ID, strings.Join(open, ", "))
	}
	for id, part := range rd.results {
		res, err := resultOf(part)
		if err != nil {
			return nil, chat.Refuse("history_refused", "tool output for call %s: %v", id, err)
		}
		p.results = append(p.results, orchestrator.Answer{ToolCallID: id, Result: res})
	}
	slices.SortFunc(p.decisions, func(a, b orchestrator.Answer) int { return strings.Compare(a.ToolCallID, b.ToolCallID) })
	slices.SortFunc(p.results, func(a, b orchestrator.Answer) int { return strings.Compare(a.ToolCallID, b.ToolCallID) })
	if p.prompt == "" && len(p.decisions) == 0 && len(p.results) == 0 && c == nil {
		return nil, chat.Refuse("no_input", "a new chat needs a user message")
	}
	return p, nil
}

// forgedError is a history error made by an approval response for a call
// that waits for none: the orchestrator refuses and records it too.
type forgedError struct {
	err    error
	answer orchestrator.Answer
}

func (e *forgedError) Error() string { return e.err.Error() }

func forgedOf(err error) *orchestrator.Answer {
	var fe *forgedError
	if errors.As(err, &fe) {
		return &fe.answer
	}
	return nil
}

// apply gives the prompt first (a paused conversation keeps it for the
// follow-up run the answers start), then the answers. Every answer was
// checked against the state read; one the orchestrator refuses all the
// same (another answer came first) ends the stream with its error.
func (h *handler) apply(ctx context.Context, req Request, p *plan) error {
	caller := api.CallerOf(ctx)
	convID := ConversationID(req.ID)
	if p.prompt != "" {
		callerJSON, _ := json.Marshal(map[string]string{"user": caller.Name})
		// The key makes a retried request (the same user message) start
		// its run once.
		sreq := orchestrator.StartRequest{Prompt: p.prompt, Agent: p.agent, Caller: callerJSON, IdempotencyKey: "ai-sdk-" + convID + "-" + p.promptID}
		if p.conv == nil {
			sreq.NewConversationID = convID
		} else {
			sreq.ConversationID = convID
		}
		if _, err := h.e.StartRunWith(ctx, sreq); err != nil {
			return err
		}
	}
	for _, a := range append(p.decisions, p.results...) {
		a.ConversationID, a.By, a.Identified = convID, caller.Name, caller.User
		if err := h.e.Answer(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// record hands a forged answer to the orchestrator, which refuses it and
// records the refusal; its verdict is not the client's business beyond
// the error it gets.
func (h *handler) record(ctx context.Context, req Request, a *orchestrator.Answer) {
	if a == nil || req.ID == "" {
		return
	}
	caller := api.CallerOf(ctx)
	a.ConversationID, a.By, a.Identified = ConversationID(req.ID), caller.Name, caller.User
	if err := h.e.Answer(ctx, *a); err == nil {
		// Refused by the adapter for what the orchestrator also checks:
		// never expected, and worth knowing.
		h.Logger.ErrorContext(ctx, "aisdk: an approval response the adapter refused was applied", slog.String("chat", req.ID), slog.String("tool_call_id", a.ToolCallID))
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
	return "refused"
}
