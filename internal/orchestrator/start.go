package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
)

// StartRequest asks for a run.
type StartRequest struct {
	Prompt string
	// ConversationID continues that conversation, which must be finished
	// or paused (the prompt then goes into the follow-up run, after the
	// batch's results); empty starts a new one.
	ConversationID string
	// Create makes ConversationID the id of a new conversation (one a chat
	// adapter derives from its thread's id) rather than one to continue;
	// an id in use is refused, or with IdempotencyKey answered as that
	// start's repeat. The id must have the form of those toolgate gives
	// ("c" then letters and digits), which its run ids embed: a reply to
	// a run of a conversation of another form names no conversation, and
	// is refused as one to an unknown run.
	Create bool
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
}

// MaxCallerBytes bounds StartRequest.Caller: who is asking, not a
// payload.
const MaxCallerBytes = 4 << 10

// checkCaller refuses a Caller that is not a JSON object or is too large
// (*BadRequestError).
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
	if o.storage.full.Load() != nil {
		// Once a start met a full store, the next ones ask the server
		// first rather than wait for an answer it will not give.
		if werr := o.cfg.serverWriteError(); werr != nil {
			return RunInfo{}, werr
		}
	}
	now := o.clock()
	convID, runPart := req.ConversationID, o.cfg.NewID()
	if req.IdempotencyKey != "" {
		runPart = keyedID("run", req.ConversationID, req.IdempotencyKey)
		if convID == "" {
			convID = "c" + keyedID("conversation", "", req.IdempotencyKey)
		}
	} else if convID == "" {
		convID = "c" + o.cfg.NewID()
	}
	runID := runIDFor(runPart, convID)
	lease := &Lease{Owner: o.cfg.InstanceID, RunID: runID, Until: now.Add(o.cfg.LeaseTTL)}
	rec := RunRecord{RunID: runID, Status: StatusRunning, Prompt: req.Prompt, StartedAt: now}
	info := RunInfo{RunID: runID, ConversationID: convID, Status: StatusRunning}

	if req.ConversationID == "" || req.Create {
		return o.startConversation(ctx, req, rec, lease, info)
	}
	return o.startInConversation(ctx, req, rec, lease, info)
}

// startConversation creates a new conversation with its first run and
// launches it here, or hands it over when another replica runs its agent.
func (o *Orchestrator) startConversation(ctx context.Context, req StartRequest, rec RunRecord, lease *Lease, info RunInfo) (RunInfo, error) {
	convID, runID, now := info.ConversationID, info.RunID, rec.StartedAt
	local, name, digest, err := o.roster.startAgent(req.Agent)
	if err != nil {
		return RunInfo{}, err
	}
	if local == nil {
		// Another replica runs the agent: the run is stored with its
		// lease expired and handed over.
		lease.Until = now
	}
	c := NewConversation(convID, rec, lease, now)
	c.Agent, c.AgentDigest, c.Caller = name, digest, req.Caller
	if local != nil && o.cfg.ClaimWindow >= 0 {
		// Stored with the run's pause or end when the run gets that far
		// within the window (tentative.go).
		if err := o.startTentative(c, runID); err != nil {
			if req.IdempotencyKey != "" && errors.Is(err, errExists) {
				return o.startedBefore(ctx, req, convID, runID)
			}
			return RunInfo{}, err
		}
		return info, nil
	}
	rev, err := o.store.create(ctx, c)
	if err != nil {
		if req.IdempotencyKey != "" && errors.Is(err, errExists) {
			return o.startedBefore(ctx, req, convID, runID)
		}
		return RunInfo{}, err
	}
	o.stats.RunsStarted.Add(1)
	if local == nil {
		o.link.handOver(ctx, c)
		return info, nil
	}
	// The run starts from the state just written, without reading it
	// back.
	o.runner.launchFrom(convID, runID, c, rev, nil)
	return info, nil
}

// startInConversation gives an existing conversation a new prompt: a run
// of it when it is finished, or the prompt queued for the follow-up of its
// pending batch when it is paused.
func (o *Orchestrator) startInConversation(ctx context.Context, req StartRequest, rec RunRecord, lease *Lease, info RunInfo) (RunInfo, error) {
	convID, runID, now := info.ConversationID, info.RunID, rec.StartedAt
	if _, _, err := o.store.get(ctx, convID); err != nil {
		return RunInfo{}, err
	}
	repeat, queued, here := false, false, true
	stored, err := o.store.update(ctx, convID, func(c *Conversation) error {
		if req.Agent != "" && req.Agent != o.roster.agentNameOf(c) {
			return &AgentMismatchError{ConversationID: c.ID, Agent: req.Agent, Want: o.roster.agentNameOf(c)}
		}
		var err error
		queued = c.Status == StatusPaused && c.runRecord(runID) == nil
		if queued {
			// The prompt waits for the batch and goes into its follow-up.
			repeat, err = c.AddPrompt(runID, req.Prompt, now)
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
			}
		}
		if err == nil && repeat {
			return errUnchanged
		}
		if err == nil {
			c.Caller = req.Caller
		}
		return err
	})
	if ie := (*IdempotencyError)(nil); errors.As(err, &ie) {
		ie.Key = req.IdempotencyKey
	}
	if err != nil {
		return RunInfo{}, err
	}
	if queued {
		o.log.InfoContext(ctx, "prompt queued for the follow-up run", slog.String("conversation_id", convID), slog.String("run_id", runID))
		return RunInfo{RunID: runID, ConversationID: convID, Status: StatusPaused}, nil
	}
	if repeat {
		return o.startedBefore(ctx, req, convID, runID)
	}
	o.stats.RunsStarted.Add(1)
	if !here {
		o.link.handOver(ctx, stored)
		return info, nil
	}
	o.runner.launch(convID, runID)
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
	rec := c.runRecord(runID)
	if rec == nil || rec.Prompt != req.Prompt {
		return RunInfo{}, &IdempotencyError{Key: req.IdempotencyKey, ConversationID: convID, RunID: runID}
	}
	if c.holdsLease(o.cfg.InstanceID, runID) && c.leaseLive(o.clock()) &&
		(c.Status == StatusRunning || c.Status == StatusResuming) {
		o.runner.launch(convID, runID)
	}
	return RunInfo{RunID: runID, ConversationID: convID, Status: rec.Status}, nil
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
