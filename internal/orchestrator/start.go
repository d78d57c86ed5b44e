package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/conversation"
)

// StartRequest asks for a run.
type StartRequest struct {
	Prompt string
	// ConversationID continues that conversation, which must be finished
	// or paused (the prompt then goes into the follow-up run, after the
	// batch's results); empty starts a new one.
	ConversationID string
	// NewConversationID, when set, is the id of the new conversation
	// instead of one the orchestrator makes (ValidNewConversationID;
	// *BadRequestError otherwise, or with ConversationID). A conversation
	// of that id already there is a *ConflictError, unless the start is
	// the repeat of the one that made it (same idempotency key and prompt).
	NewConversationID string
	// IdempotencyKey, when set, makes the start safe to retry: a start
	// whose answer was lost (a timeout while the store's leader moved, a
	// dropped connection) may still have happened, and its retry with the
	// same key answers with the run it started instead of starting
	// another. The run and conversation ids are derived from it.
	IdempotencyKey string
	// Agent names the agent of a new conversation; empty is the only agent
	// there is (*UnknownAgentError when there are several, or when no
	// replica runs the one named). For an existing conversation it may
	// only name the conversation's own (*AgentMismatchError).
	Agent string
	// Caller is what the application says of who gives the prompt, a JSON
	// object (a user id, a role, a tenant): the conversation keeps the
	// latest prompt's, and its runs' tools, approval rules and handlers
	// see it as RunContext.Caller. It is passed on as given, as
	// trustworthy as the client that sends it. At most MaxCallerBytes.
	Caller json.RawMessage
	// FrontendTools are tools the frontend that drives the conversation
	// declares (AG-UI's RunAgentInput.tools): offered to the model in the
	// conversation's runs beside the agent's, each call of one waiting for
	// the frontend's answer as a call of an executor: frontend tool does.
	// Non-nil replaces the conversation's; nil keeps them. Checked by
	// checkFrontendTools and against the agent's tools (*BadRequestError).
	FrontendTools []agent.ToolDef
}

// MaxCallerBytes bounds StartRequest.Caller: who is asking, not a
// payload.
const MaxCallerBytes = 4 << 10

// checkCaller refuses a Caller that is not a JSON object or is too large
// (*BadRequestError).
// maxPromptEventBytes bounds a prompt as its run's run_started event
// carries it, JSON-escaped, in one message: under the server's default
// max payload (1 MiB) with room for the event's other fields.
const maxPromptEventBytes = 768 << 10

// checkPrompt refuses a prompt whose run_started event could not be
// published: the conversation's log would hold it, but a client
// following the events would never see the run begin.
func checkPrompt(prompt string) error {
	b, err := json.Marshal(prompt)
	if err != nil {
		return &BadRequestError{"prompt: " + err.Error()}
	}
	if len(b) > maxPromptEventBytes {
		return &BadRequestError{fmt.Sprintf("prompt: %d bytes once JSON-escaped in its run_started event, over %d (<, >, & and control characters take six bytes each)", len(b), maxPromptEventBytes)}
	}
	return nil
}

func checkCaller(caller json.RawMessage) error {
	if len(caller) == 0 {
		return nil
	}
	if len(caller) > MaxCallerBytes {
		return &BadRequestError{fmt.Sprintf("caller: larger than %d bytes", MaxCallerBytes)}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(caller, &obj); err != nil || obj == nil {
		return &BadRequestError{"caller: not a JSON object"}
	}
	return nil
}

// IdempotencyError says an idempotency key was used before for another
// request.
type IdempotencyError struct {
	Key, ConversationID, RunID string
}

func (e *IdempotencyError) Error() string {
	return fmt.Sprintf("idempotency key %q was used for another request (run %s of conversation %s)", e.Key, e.RunID, e.ConversationID)
}

// StartRun starts a run with prompt: in a new conversation when
// conversationID is empty, else continuing that conversation, which must be
// completed or failed (*ConflictError otherwise, ErrNotFound when unknown).
func (o *Orchestrator) StartRun(ctx context.Context, prompt, conversationID string) (RunInfo, error) {
	return o.StartRunWith(ctx, StartRequest{Prompt: prompt, ConversationID: conversationID})
}

// StartRunWith is StartRun with an optional idempotency key: a repeat of a start
// with the same key and request answers with the run the first one started
// (*IdempotencyError if the key came with another request).
//
// A start is the write that tells whether the store has room again after it
// had none: its outcome is noted for Health.
func (o *Orchestrator) StartRunWith(ctx context.Context, req StartRequest) (_ RunInfo, err error) {
	defer func() {
		if err != nil && !StorageFull(err) {
			// A write that got no answer: the server may be keeping a
			// write error (its disk filled below its limit).
			if werr := o.cfg.serverWriteError(); werr != nil {
				err = fmt.Errorf("%w (%v)", werr, err)
			}
		}
		o.storage.note(err)
	}()
	if o.stopped.Load() {
		return RunInfo{}, ErrStopped
	}
	ctx = answersRequest(ctx)
	if string(req.Caller) == "null" {
		req.Caller = nil
	}
	if err := checkCaller(req.Caller); err != nil {
		return RunInfo{}, err
	}
	if err := checkPrompt(req.Prompt); err != nil {
		return RunInfo{}, err
	}
	if err := checkFrontendTools(req.FrontendTools); err != nil {
		return RunInfo{}, err
	}
	if o.storage.full.Load() != nil {
		// Once a start met a full store, the next ones ask the server
		// first rather than wait for an answer it will not give.
		if werr := o.cfg.serverWriteError(); werr != nil {
			return RunInfo{}, werr
		}
	}
	if err := checkNewConversationID(req); err != nil {
		return RunInfo{}, err
	}
	now := o.clock()
	convID, runPart := req.ConversationID, o.cfg.NewID()
	if req.NewConversationID != "" {
		convID = req.NewConversationID
	}
	if req.IdempotencyKey != "" {
		runPart = keyedID("run", req.ConversationID, req.IdempotencyKey)
		if convID == "" {
			convID = "c" + keyedID("conversation", "", req.IdempotencyKey)
		}
	} else if convID == "" {
		convID = "c" + o.cfg.NewID()
	}
	runID := runIDFor(runPart, convID)
	if req.IdempotencyKey == "" {
		// In a partition of this replica's, so that the run's replies
		// come back to the state it caches (ownership.go).
		runID = o.pipe.ownRunID(convID)
	}
	lease := &conversation.Lease{Owner: o.cfg.InstanceID, RunID: runID, Until: now.Add(o.cfg.LeaseTTL)}
	rec := conversation.RunRecord{RunID: runID, Status: conversation.StatusRunning, Prompt: req.Prompt, StartedAt: now}
	info := RunInfo{RunID: runID, ConversationID: convID, Status: conversation.StatusRunning}

	if req.ConversationID == "" {
		return o.startConversation(ctx, req, rec, lease, info)
	}
	return o.startInConversation(ctx, req, rec, lease, info)
}

// startConversation creates a new conversation with its first run and
// launches it here, or hands it over when another replica runs its agent.
func (o *Orchestrator) startConversation(ctx context.Context, req StartRequest, rec conversation.RunRecord, lease *conversation.Lease, info RunInfo) (RunInfo, error) {
	convID, runID, now := info.ConversationID, info.RunID, rec.StartedAt
	local, name, digest, err := o.roster.startAgent(req.Agent)
	if err != nil {
		return RunInfo{}, err
	}
	if local != nil {
		if err := o.discovery.frontendClash(local.cfg, req.FrontendTools); err != nil {
			return RunInfo{}, err
		}
	}
	if req.NewConversationID != "" {
		// Looked for before anything runs: a first run started from memory
		// (tentative.go) would call the model before its store found the
		// id taken.
		if err := o.newIDFree(ctx, req, runID); err != nil {
			return RunInfo{}, err
		}
	}
	if local == nil {
		// Another replica runs the agent: the run is stored with its
		// lease expired and handed over.
		lease.Until = now
	}
	c := conversation.New(convID, rec, lease, now)
	c.Agent, c.AgentDigest, c.Caller, c.FrontendTools = name, digest, req.Caller, req.FrontendTools
	c.Signed = local != nil && local.policy.signed()
	if local != nil && o.cfg.ClaimWindow >= 0 {
		// Stored with the run's pause or end when the run gets that far
		// within the window (tentative.go).
		if err := o.startTentative(c, runID); err != nil {
			if req.IdempotencyKey != "" && errors.Is(err, errExists) {
				return o.chosenIDTaken(ctx, req, convID, runID)
			}
			if errors.Is(err, errExists) && req.NewConversationID != "" {
				return RunInfo{}, &conversation.ConflictError{ConversationID: convID, Op: conversation.OpCreate}
			}
			return RunInfo{}, err
		}
		return info, nil
	}
	if err := o.fx.create(ctx, c, conversation.StartedEffects(runID, local != nil)); err != nil {
		if req.IdempotencyKey != "" && errors.Is(err, errExists) {
			return o.chosenIDTaken(ctx, req, convID, runID)
		}
		if errors.Is(err, errExists) && req.NewConversationID != "" {
			return RunInfo{}, &conversation.ConflictError{ConversationID: convID, Op: conversation.OpCreate}
		}
		return RunInfo{}, err
	}
	return info, nil
}

// startTentative launches the first run of c, a new conversation whose
// lease this replica holds, before c is stored (the effector defers its
// first record, tentative.go), and returns once that record is stored
// (alone, or with the run's pause or end) or cannot be: errExists
// (wrapped) when the conversation was there before, ErrStopped when the
// orchestrator stopped first, or the append's error.
func (o *Orchestrator) startTentative(c *conversation.State, runID string) error {
	d := o.fx.deferStart(c, runID)
	// A start of the same conversation going on here (a retry with the
	// same idempotency key) is waited for: the conversation is there once
	// it is stored.
	for {
		prev, loaded := o.starting.LoadOrStore(c.ID, d)
		if !loaded {
			break
		}
		p := prev.(*deferredAppend)
		if p.answer() == nil {
			return fmt.Errorf("start conversation %s: %w", c.ID, errExists)
		}
		// Dropped (stopped, or refused): this one takes its place, unless
		// another retry did first.
		if o.starting.CompareAndSwap(c.ID, p, d) {
			break
		}
	}
	defer o.starting.CompareAndDelete(c.ID, d)
	o.fx.launchDeferred(d, c)
	// Not bounded by the caller's context: the run goes on, and the start
	// is stored within the window and an append's timeout, whether or not
	// anyone waits for its answer.
	return d.answer()
}

// startInConversation gives an existing conversation a new prompt: a run
// of it when it is finished, or the prompt queued for the follow-up of its
// pending batch when it is paused.
func (o *Orchestrator) startInConversation(ctx context.Context, req StartRequest, rec conversation.RunRecord, lease *conversation.Lease, info RunInfo) (RunInfo, error) {
	convID, runID, now := info.ConversationID, info.RunID, rec.StartedAt
	if _, _, err := o.store.get(ctx, convID); err != nil {
		return RunInfo{}, err
	}
	repeat, queued, here := false, false, true
	_, _, err := o.fx.do(ctx, convID, func(c *conversation.State, _ time.Time) ([]conversation.Effect, error) {
		if req.Agent != "" && req.Agent != o.roster.agentNameOf(c) {
			return nil, &AgentMismatchError{ConversationID: c.ID, Agent: req.Agent, Want: o.roster.agentNameOf(c)}
		}
		if a := o.roster.agentOf(c); a != nil {
			if err := o.discovery.frontendClash(a.cfg, req.FrontendTools); err != nil {
				return nil, err
			}
		}
		var err error
		queued = c.Status == conversation.StatusPaused && c.RunRecord(runID) == nil
		if queued {
			// The prompt waits for the batch and goes into its follow-up.
			repeat, err = c.AddPrompt(runID, req.Prompt, now)
			if errors.Is(err, conversation.ErrOtherPrompt) {
				err = &IdempotencyError{ConversationID: c.ID, RunID: runID}
			}
		} else {
			// A new prompt runs with the config of the replica that takes
			// it, if this one runs the agent; else it is handed over.
			l := *lease
			a := o.roster.agentOf(c)
			here = a != nil
			if !here {
				l.Until = now
			}
			repeat, err = c.Start(rec, &l, now)
			if err == nil && !repeat && here {
				c.SetAgent(a.name, a.digest)
				c.Signed = c.Signed || a.policy.signed()
			}
		}
		var effects []conversation.Effect
		if queued {
			effects = []conversation.Effect{conversation.LogEffect(slog.LevelInfo, "prompt queued for the follow-up run", slog.String("run_id", runID))}
		}
		switch {
		case err != nil:
			return nil, err
		case repeat && !sameRequest(c, runID, req):
			return nil, &IdempotencyError{ConversationID: c.ID, RunID: runID}
		case repeat:
			return effects, conversation.ErrUnchanged
		}
		c.Caller = req.Caller
		if req.FrontendTools != nil {
			c.FrontendTools = req.FrontendTools
		}
		if queued {
			return effects, nil
		}
		effects = conversation.StartedEffects(runID, here)
		// The run reads the state it starts from.
		effects[1].Read = true
		return effects, nil
	})
	if ie := (*IdempotencyError)(nil); errors.As(err, &ie) {
		ie.Key = req.IdempotencyKey
	}
	if err != nil {
		return RunInfo{}, err
	}
	if queued {
		return RunInfo{RunID: runID, ConversationID: convID, Status: conversation.StatusQueued}, nil
	}
	if repeat {
		return o.startedBefore(ctx, req, convID, runID)
	}
	return info, nil
}

// startedBefore answers a repeated start: the run the first attempt
// started, which this process launches now if the first attempt took the
// lease but never got to launch it (its write's answer was lost).
func (o *Orchestrator) startedBefore(ctx context.Context, req StartRequest, convID, runID string) (RunInfo, error) {
	c, _, err := o.store.get(ctx, convID)
	if err != nil {
		return RunInfo{}, err
	}
	rec := c.RunRecord(runID)
	if rec == nil || rec.Prompt != req.Prompt || !sameRequest(c, runID, req) ||
		req.Agent != "" && req.Agent != o.roster.agentNameOf(c) {
		return RunInfo{}, &IdempotencyError{Key: req.IdempotencyKey, ConversationID: convID, RunID: runID}
	}
	if c.HoldsLease(o.cfg.InstanceID, runID) && c.LeaseLive(o.clock()) &&
		(c.Status == conversation.StatusRunning || c.Status == conversation.StatusResuming) {
		o.fx.startRun(convID, runID, nil, 0, nil)
	}
	return RunInfo{RunID: runID, ConversationID: convID, Status: rec.Status}, nil
}

// sameRequest reports whether a repeat of the start of run runID comes
// with the caller that start gave, as far as c tells: it keeps the caller
// of its latest prompt only, so a run that an other prompt followed (whose
// start's answer its client had, or it would not have known the
// conversation) passes.
func sameRequest(c *conversation.State, runID string, req StartRequest) bool {
	if latestPromptRun(c) != runID {
		return true
	}
	// Canonical JSON, an absent caller as {}.
	return sameJSON(c.Caller, req.Caller)
}

// latestPromptRun is the run of c's latest prompt: one queued for the
// follow-up of its batch, else its latest run that has a prompt.
func latestPromptRun(c *conversation.State) string {
	if c.Batch != nil && c.Batch.PromptRunID != "" && c.RunRecord(c.Batch.PromptRunID) == nil {
		return c.Batch.PromptRunID
	}
	for i := len(c.Runs) - 1; i >= 0; i-- {
		if c.Runs[i].Prompt != "" {
			return c.Runs[i].RunID
		}
	}
	return ""
}

// keyedID derives an id from an idempotency key, the same for every
// replica and retry; scope keeps a conversation's and a run's apart, and
// convID makes the same key name different runs in different
// conversations.
func keyedID(scope, convID, key string) string {
	h := sha256.New()
	for _, s := range []string{scope, convID, key} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// ValidNewConversationID reports whether a client may give s as the id of
// a new conversation: "c" then 1 to 127 letters and digits, the form of
// the ids the orchestrator makes. A run id carries its conversation's id
// in that form (runIDFor), so that a reply finds its conversation without
// a read, on any replica, after any restart.
func ValidNewConversationID(s string) bool {
	return len(s) >= 2 && len(s) <= 128 && s[0] == 'c' && alnum(s)
}

func checkNewConversationID(req StartRequest) error {
	switch {
	case req.NewConversationID == "":
		return nil
	case req.ConversationID != "":
		return &BadRequestError{"new_conversation_id: names a new conversation; conversation_id continues one: give one of them"}
	case !ValidNewConversationID(req.NewConversationID):
		return &BadRequestError{fmt.Sprintf("new_conversation_id: %q is not \"c\" then 1 to 127 letters and digits (e.g. c%s)", req.NewConversationID, "order17")}
	}
	return nil
}

// newIDFree refuses a chosen id that a conversation has already
// (*ConflictError), unless this start is the repeat of the one that made
// it, which is answered as any repeat.
func (o *Orchestrator) newIDFree(ctx context.Context, req StartRequest, runID string) error {
	c, _, err := o.store.get(ctx, req.NewConversationID)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return err
	case req.IdempotencyKey != "" && c.RunRecord(runID) != nil:
		// The repeat of this start: create answers it (errExists).
		return nil
	}
	return &conversation.ConflictError{ConversationID: req.NewConversationID, Status: c.Status, Op: conversation.OpCreate}
}

// chosenIDTaken answers a start whose conversation was there when it came
// to store it: as the repeat it is, unless the id was chosen by the client
// and the conversation was made by another start (*ConflictError).
func (o *Orchestrator) chosenIDTaken(ctx context.Context, req StartRequest, convID, runID string) (RunInfo, error) {
	if req.NewConversationID != "" {
		c, _, err := o.store.get(ctx, convID)
		if err == nil && c.RunRecord(runID) == nil {
			return RunInfo{}, &conversation.ConflictError{ConversationID: convID, Status: c.Status, Op: conversation.OpCreate}
		}
	}
	return o.startedBefore(ctx, req, convID, runID)
}
