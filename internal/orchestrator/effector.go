package orchestrator

import (
	"context"
	"log/slog"
	"time"
)

// effector is the one write path of a conversation's changes: do applies a
// transition under optimistic concurrency, and the effects of the write
// that won, and of it only, are carried out here, in the order the
// transition listed them. Its collaborators are handed to it; it reaches
// for no part of the orchestrator.
type effector struct {
	effectorParams
}

// conversationStore is the store as the write path uses it: the
// conversations' JetStream logs (store), or memory in tests of the
// effector (memStore); conversationStoreSuite holds both to the same
// contract.
type conversationStore interface {
	// updateFrom applies fn to conversation id from c as stored at seq
	// (nil c: the current state) and appends what it changed, only if
	// nothing was appended since; on a conflict it catches up and applies
	// fn again. fn returning errUnchanged ends it without a write, and
	// nil error; any other error ends it with that error. It returns the
	// state (the caller's) and its sequence.
	updateFrom(ctx context.Context, id string, c *Conversation, seq uint64, fn func(*Conversation) error) (*Conversation, uint64, error)
	// create stores c as a new conversation (errExists, wrapped, when
	// there is one) and returns its sequence.
	create(ctx context.Context, c *Conversation) (uint64, error)
	// indexNow lists id as not finished at once, for every replica.
	indexNow(ctx context.Context, id string) error
	// followUpRequest calls stored, once, if an append whose outcome err
	// left unknown turns out stored (off the request's way: spawn).
	followUpRequest(ctx context.Context, id string, spawn func(func()), err error, stored func())
}

// eventSink takes the events of conversations.
type eventSink interface {
	publish(ctx context.Context, convID, runID, typ, callID string, data any)
}

// effectorParams are what the effects are carried out with.
type effectorParams struct {
	log       *slog.Logger
	clock     func() time.Time
	store     conversationStore
	events    eventSink
	deadlines *deadlineIndex
	// observer counts what the effects did.
	observer observer
	// owner is this replica, which takes the leases; leaseTTL their
	// length; newID makes the id of a follow-up no prompt named.
	owner    string
	leaseTTL time.Duration
	newID    func() string
	// followUpID, when set, makes a follow-up's whole run id instead.
	followUpID func(c *Conversation) string
	// mine says whether this replica runs c (its agent, its config).
	mine func(c *Conversation) bool
	// notifyCancel tells run runID to stop wherever it executes.
	notifyCancel func(runID string) error
	// withdraw takes settled external calls out of the work queue.
	withdraw func(ctx context.Context, convID, runID string, calls []*PendingCall)
	// escalate hands an escalated approval to its tool's EscalateTo.
	escalate func(ctx context.Context, c *Conversation, pc *PendingCall)
	// batchDone forgets what this replica keeps of a complete batch.
	batchDone func(convID, runID string)
	// launch executes run runID from c, as written at rev (nil: read it).
	launch func(convID, runID string, c *Conversation, rev uint64)
	// handOver nudges the replicas of c's agent to take its run.
	handOver func(ctx context.Context, c *Conversation)
	// spawn runs f on a goroutine Stop waits for, unless stopping; track
	// runs it on one Stop waits for, stopping or not.
	spawn func(f func())
	track func(f func())
	// audit records grants' uses on the audit stream.
	audit func(ctx context.Context, convID, runID string, uses []grantUse)
	// awaitReplies makes the event sink hold the conversation's events
	// a moment for the replies to its calls.
	awaitReplies func(convID string)
	// publishPaused publishes the calls of a paused run's batch.
	publishPaused func(ctx context.Context, c *Conversation) error
	// publishBatch publishes the calls of a batch and marks them.
	publishBatch func(ctx context.Context, c *Conversation) error
	// replied publishes what a recorded reply changed.
	replied func(ctx context.Context, convID string, j *replyJob)
	// publishDispatched publishes the calls ids of c's batch that were
	// just dispatched to their workers; dispatchUnpublished, a test's,
	// leaves them to reconcile.
	publishDispatched   func(ctx context.Context, c *Conversation, ids []string) error
	dispatchUnpublished bool
	// onRunEnd is Config.OnRunEnd (nil: none).
	onRunEnd func(*Conversation)
}

func newEffector(p effectorParams) *effector { return &effector{effectorParams: p} }

// claimer makes this replica's claims: with a lease of leaseTTL on what
// it runs, and expired on what it does not, so that a replica of its
// agent takes it over (the follow-up effect nudges them; their reconcile
// would find it too).
func (e *effector) claimer() claimer {
	return claimer{owner: e.owner, newID: e.newID, runID: e.followUpID, ttl: func(c *Conversation) time.Duration {
		if !e.mine(c) {
			return 0
		}
		return e.leaseTTL
	}}
}

// claim takes the complete batch of conversation id for its follow-up,
// which it launches (or hands over), so exactly one replica (or restart)
// launches the follow-up (D35).
func (e *effector) claim(ctx context.Context, id string) {
	if _, _, err := e.do(ctx, id, claimTransition(e.claimer())); err != nil {
		e.log.WarnContext(ctx, "claim batch", slog.String("conversation_id", id), slog.String("error", err.Error()))
	}
}

// relaunch takes over the run of conversation id whose lease expired (its
// replica died or shut down) and executes it again with the same run id,
// so that what it publishes again dedupes.
func (e *effector) relaunch(ctx context.Context, id string) {
	if _, _, err := e.do(ctx, id, takeOverTransition(e.owner, e.leaseTTL, e.mine)); err != nil {
		e.log.WarnContext(ctx, "relaunch", slog.String("conversation_id", id), slog.String("error", err.Error()))
	}
}

// settled moves c on after calls of its batch were settled
// (settledEffects).
func (e *effector) settled(ctx context.Context, c *Conversation) {
	e.carryOut(ctx, c, 0, settledEffects(c))
}

// do applies t to conversation id from its current state, stores what it
// changed and carries out its effects. A change too large to store fails
// the conversation (abortTransition) and returns the *TooLargeError.
func (e *effector) do(ctx context.Context, id string, t transition) (*Conversation, uint64, error) {
	c, rev, err := e.doFrom(ctx, id, nil, 0, t)
	if tl := tooLarge(err); tl != nil {
		e.failTooLarge(ctx, id, tl)
	}
	return c, rev, err
}

// doFrom is do from a state the caller read (or wrote) at rev (nil c:
// the current one), leaving a change too large to the caller.
func (e *effector) doFrom(ctx context.Context, id string, from *Conversation, rev uint64, t transition) (*Conversation, uint64, error) {
	var effects []effect
	c, rev, err := e.store.updateFrom(ctx, id, from, rev, func(c *Conversation) error {
		var err error
		effects, err = t(c, e.clock())
		return err
	})
	if err != nil {
		return c, rev, err
	}
	e.carryOut(ctx, c, rev, effects)
	return c, rev, nil
}

// doRequest is do for a client's request, which waits for its answer: an
// append whose outcome is still unknown at the store's timeout fails the
// request, and is followed up off its way; the effects are carried out
// there if it turns out stored, once (store.followUpRequest).
func (e *effector) doRequest(ctx context.Context, id string, t transition) (*Conversation, error) {
	ctx = answersRequest(ctx)
	var (
		effects []effect
		applied *Conversation
	)
	c, rev, err := e.store.updateFrom(ctx, id, nil, 0, func(c *Conversation) error {
		var err error
		effects, err = t(c, e.clock())
		applied = c
		return err
	})
	if tl := tooLarge(err); tl != nil {
		e.failTooLarge(ctx, id, tl)
	}
	if err != nil {
		// What the append that may yet turn out stored asked for: the
		// state it wrote, as the transition left it.
		e.store.followUpRequest(ctx, id, e.spawn, err, func() { e.carryOut(ctx, applied, 0, effects) })
		return nil, err
	}
	e.carryOut(ctx, c, rev, effects)
	return c, nil
}

// create stores c, a new conversation, and carries out what its first
// record asks for (effects); c is handed over to a run they launch.
func (e *effector) create(ctx context.Context, c *Conversation, effects []effect) error {
	rev, err := e.store.create(ctx, c)
	if err != nil {
		return err
	}
	e.carryOut(ctx, c, rev, effects)
	return nil
}

// failTooLarge fails the conversation that a change would have taken over
// the store's limit, with the reason in its status and a run_failed event.
func (e *effector) failTooLarge(ctx context.Context, id string, tl *TooLargeError) {
	if _, _, err := e.doFrom(ctx, id, nil, 0, abortTransition(tl.Error())); err != nil {
		e.log.ErrorContext(ctx, "fail a conversation too large to store", slog.String("conversation_id", id), slog.String("error", err.Error()))
	}
}

// carryOut carries out effects, which the write of c (at rev) asked for.
// c is handed over to a run it launches.
func (e *effector) carryOut(ctx context.Context, c *Conversation, rev uint64, effects []effect) {
	for _, ef := range effects {
		e.carry(ctx, c, rev, ef)
	}
}

func (e *effector) carry(ctx context.Context, c *Conversation, rev uint64, ef effect) {
	id := c.ID
	switch ef.kind {
	case effectNotifyCancel:
		for _, r := range ef.runs {
			if err := e.notifyCancel(r); err != nil {
				e.log.WarnContext(ctx, "cancel notice", slog.String("conversation_id", id), slog.String("run_id", r), slog.String("error", err.Error()))
			}
		}
	case effectWithdraw:
		wctx := ctx
		if ef.detached {
			wctx = context.WithoutCancel(ctx)
		}
		e.withdraw(wctx, id, ef.runID, ef.calls)
	case effectExpired:
		for _, pc := range ef.calls {
			e.observer.expired(string(pc.Kind))
		}
		e.log.InfoContext(ctx, "calls expired", slog.String("conversation_id", id), slog.Int("calls", len(ef.calls)))
	case effectEmit:
		e.events.publish(ctx, id, ef.runID, ef.event, ef.callID, ef.data)
	case effectEscalate:
		for _, pc := range ef.calls {
			e.escalate(ctx, c, pc)
		}
	case effectBatchDone:
		e.batchDone(id, ef.runID)
	case effectClaim:
		e.claim(ctx, id)
	case effectSchedule:
		e.deadlines.schedule(c)
	case effectFollowUp:
		if !c.leaseLive(e.clock()) {
			e.handOver(ctx, c)
			return
		}
		e.observer.followUp()
		e.log.InfoContext(ctx, "batch complete; follow-up claimed", slog.String("conversation_id", id),
			slog.String("paused_run_id", c.Batch.RunID), slog.String("run_id", ef.runID))
		e.launch(id, ef.runID, c, rev)
	case effectRelaunch:
		e.observer.runRelaunched()
		e.log.InfoContext(ctx, "relaunching run", slog.String("conversation_id", id), slog.String("run_id", ef.runID))
		e.launch(id, ef.runID, nil, 0)
	case effectStarted:
		e.observer.runStarted()
	case effectLaunch:
		if ef.read {
			e.launch(id, ef.runID, nil, 0)
			return
		}
		e.launch(id, ef.runID, c, rev)
	case effectHandOver:
		e.handOver(ctx, c)
	case effectPublishInline:
		if err := e.publishBatch(ctx, c); err != nil {
			// Not fatal: the calls stay unmarked and are published when
			// the run pauses.
			e.log.WarnContext(ctx, "inline: publish batch", slog.String("conversation_id", id), slog.String("error", err.Error()))
		}
	case effectReplied:
		for _, j := range ef.jobs {
			e.replied(ctx, id, j)
			close(j.done)
		}
	case effectPublishDispatched:
		if e.dispatchUnpublished {
			return
		}
		// Off the replies' way (their record is stored: what is not
		// published is reconcile's to publish); the publication reads a
		// copy, c staying the caller's.
		conv := c.clone()
		log := e.log.With(slog.String("conversation_id", id), slog.String("run_id", conv.Batch.RunID))
		e.spawn(func() {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replyTimeout)
			defer cancel()
			if err := e.publishDispatched(pctx, conv, ef.callIDs); err != nil {
				log.WarnContext(pctx, "publish approved calls: left to reconcile", slog.String("error", err.Error()))
			}
		})
	case effectEndWritten:
		e.observer.endWritten()
	case effectAudit:
		e.audit(ctx, id, ef.runID, ef.grants)
	case effectIndex:
		if err := e.store.indexNow(ctx, id); err != nil {
			e.log.WarnContext(ctx, "index a conversation awaiting approval: left to its creator's next advert", slog.String("conversation_id", id), slog.String("error", err.Error()))
		}
	case effectAwaitReplies:
		e.awaitReplies(id)
	case effectPublishPaused:
		// Nothing on the calls' way waits for their acks: a worker gets a
		// call once the stream has stored it, whether or not this replica
		// has heard so, and a publish that fails is left to reconcile,
		// which publishes what is unmarked. The acks are awaited off the
		// run's path (and before Stop returns), then OnRunEnd is told; c
		// is not changed after this.
		e.track(func() {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replyTimeout)
			defer cancel()
			if err := e.publishPaused(pctx, c); err != nil {
				e.log.WarnContext(pctx, "publish batch", slog.String("conversation_id", id), slog.String("run_id", ef.runID), slog.String("error", err.Error()))
			}
			if e.onRunEnd != nil {
				e.onRunEnd(c)
			}
		})
	case effectRunEnded:
		if e.onRunEnd != nil {
			e.onRunEnd(c)
		}
	case effectLog:
		attrs := append([]slog.Attr{slog.String("conversation_id", id)}, ef.attrs...)
		e.log.LogAttrs(ctx, ef.level, ef.msg, attrs...)
	default:
		panic("orchestrator: effect " + ef.kind.String() + " has no arm")
	}
}
