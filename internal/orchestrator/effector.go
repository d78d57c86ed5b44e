package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
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
	// fn again. fn returning conversation.ErrUnchanged ends it without a write, and
	// nil error; any other error ends it with that error. It returns the
	// state (the caller's) and its sequence.
	updateFrom(ctx context.Context, id string, c *conversation.State, seq uint64, fn func(*conversation.State) error) (*conversation.State, uint64, error)
	// create stores c as a new conversation (errExists, wrapped, when
	// there is one) and returns its sequence.
	create(ctx context.Context, c *conversation.State) (uint64, error)
	// commit appends what turned the state base fingerprints (stored at
	// seq) into c, only if nothing was appended since: no catch-up, no
	// retry (a deferred append, tentative.go).
	commit(ctx context.Context, c *conversation.State, base *conversation.Fingerprint, seq uint64) (uint64, error)
	// indexNow lists id as not finished at once, for every replica.
	indexNow(ctx context.Context, id string) error
	// followUpRequest calls stored, once, if an append whose outcome err
	// left unknown turns out stored (off the request's way: spawn).
	followUpRequest(ctx context.Context, id string, spawn func(func()), err error, stored func())
	// delete appends the tombstone fn makes of conversation id and
	// returns it (errDeleted, wrapped, when there is one already); purge
	// removes id's records but its last keep, and its due entry.
	delete(ctx context.Context, id string, fn func(*conversation.State) error) (*conversation.State, error)
	purge(ctx context.Context, id string, keep uint64) error
}

// eventSink takes the events of conversations, and is told of the runs
// the effector launches, whose events it batches (events.go).
type eventSink interface {
	publish(ctx context.Context, convID, runID, typ, callID string, data any)
	// runBegan and runEnded bracket a run of convID here; a deferred
	// run's events wait apart until settleRun or dropRun.
	runBegan(convID, runID string, deferred bool)
	runEnded(convID, runID string)
	settleRun(convID, runID string)
	dropRun(convID, runID string)
	// awaitReplies holds the conversation's events a moment for the
	// replies to its calls.
	awaitReplies(convID string)
	// purge removes all the conversation's events.
	purge(ctx context.Context, convID string) error
}

// runHooks are told of a run the runner launches: began once it is
// accepted (before it can emit anything), ended once it is over, whichever
// way it ended; neither when it is not launched.
type runHooks struct{ began, ended func() }

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
	followUpID func(c *conversation.State) string
	// mine says whether this replica runs c (its agent, its config).
	mine func(c *conversation.State) bool
	// notifyCancel tells run runID to stop wherever it executes.
	notifyCancel func(runID string) error
	// withdraw takes settled external calls out of the work queue.
	withdraw func(ctx context.Context, convID, runID string, calls []*conversation.PendingCall)
	// escalate hands an escalated approval to its tool's EscalateTo.
	escalate func(ctx context.Context, c *conversation.State, pc *conversation.PendingCall)
	// batchDone forgets what this replica keeps of a complete batch.
	batchDone func(convID, runID string)
	// launch executes run runID from c, as written at rev (nil: read it);
	// d is its deferred record (tentative.go), if it has one.
	launch func(convID, runID string, c *conversation.State, rev uint64, d *deferredAppend, hooks runHooks)
	// claimWindow is how long a deferred record may wait
	// (Config.ClaimWindow); runCtx the context it is stored in then.
	claimWindow time.Duration
	runCtx      context.Context
	// reapply records replies again from the stored state, when the
	// deferred record that held them could not be stored.
	reapply func(ctx context.Context, convID string, jobs []*replyJob)
	// handOver nudges the replicas of c's agent to take its run.
	handOver func(ctx context.Context, c *conversation.State)
	// spawn runs f on a goroutine Stop waits for, unless stopping; track
	// runs it on one Stop waits for, stopping or not.
	spawn func(f func())
	track func(f func())
	// audit records grants' uses on the audit stream.
	audit func(ctx context.Context, convID, runID string, uses []conversation.GrantUse)
	// publishPaused publishes the calls of a paused run's batch.
	publishPaused func(ctx context.Context, c *conversation.State) error
	// publishBatch publishes the calls of a batch and marks them.
	publishBatch func(ctx context.Context, c *conversation.State) error
	// replied publishes what a recorded reply changed.
	replied func(ctx context.Context, convID string, j *replyJob)
	// publishDispatched publishes the calls ids of c's batch that were
	// just dispatched to their workers; dispatchUnpublished, a test's,
	// leaves them to reconcile.
	publishDispatched   func(ctx context.Context, c *conversation.State, ids []string) error
	dispatchUnpublished bool
	// onRunEnd is Config.OnRunEnd (nil: none).
	onRunEnd func(*conversation.State)
}

func newEffector(p effectorParams) *effector { return &effector{effectorParams: p} }

// claimer makes this replica's claims: with a lease of leaseTTL on what
// it runs, and expired on what it does not, so that a replica of its
// agent takes it over (the follow-up effect nudges them; their reconcile
// would find it too).
func (e *effector) claimer() conversation.Claimer {
	newRunID := func(c *conversation.State) string {
		if e.followUpID != nil {
			return e.followUpID(c)
		}
		return runIDFor(e.newID(), c.ID)
	}
	return conversation.Claimer{Owner: e.owner, NewRunID: newRunID, TTL: func(c *conversation.State) time.Duration {
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
	if _, _, err := e.do(ctx, id, conversation.ClaimTransition(e.claimer())); err != nil {
		e.log.WarnContext(ctx, "claim batch", slog.String("conversation_id", id), slog.String("error", err.Error()))
	}
}

// relaunch takes over the run of conversation id whose lease expired (its
// replica died or shut down) and executes it again with the same run id,
// so that what it publishes again dedupes.
func (e *effector) relaunch(ctx context.Context, id string) {
	if _, _, err := e.do(ctx, id, conversation.TakeOverTransition(e.owner, e.leaseTTL, e.mine)); err != nil {
		e.log.WarnContext(ctx, "relaunch", slog.String("conversation_id", id), slog.String("error", err.Error()))
	}
}

// settled moves c on after calls of its batch were settled
// (conversation.SettledEffects).
func (e *effector) settled(ctx context.Context, c *conversation.State) {
	e.carryOut(ctx, c, 0, conversation.SettledEffects(c))
}

// do applies t to conversation id from its current state, stores what it
// changed and carries out its effects. A change too large to store fails
// the conversation (conversation.Abort) and returns the *TooLargeError.
func (e *effector) do(ctx context.Context, id string, t conversation.Transition) (*conversation.State, uint64, error) {
	c, rev, err := e.doFrom(ctx, id, nil, 0, t)
	if tl := tooLarge(err); tl != nil {
		e.failTooLarge(ctx, id, tl)
	}
	return c, rev, err
}

// doFrom is do from a state the caller read (or wrote) at rev (nil c:
// the current one), leaving a change too large to the caller.
func (e *effector) doFrom(ctx context.Context, id string, from *conversation.State, rev uint64, t conversation.Transition) (*conversation.State, uint64, error) {
	return e.doReplies(ctx, id, from, rev, t, nil)
}

// doReplies is doFrom for a transition that records the replies jobs,
// whose deliveries its conversation.EffectReplied answers.
func (e *effector) doReplies(ctx context.Context, id string, from *conversation.State, rev uint64, t conversation.Transition, jobs []*replyJob) (*conversation.State, uint64, error) {
	var effects []conversation.Effect
	c, rev, err := e.store.updateFrom(ctx, id, from, rev, func(c *conversation.State) error {
		var err error
		effects, err = t(c, e.clock())
		return err
	})
	if err != nil {
		return c, rev, err
	}
	e.carryOut(ctx, c, rev, effects, jobs...)
	return c, rev, nil
}

// doRequest is do for a client's request, which waits for its answer: an
// append whose outcome is still unknown at the store's timeout fails the
// request, and is followed up off its way; the effects are carried out
// there if it turns out stored, once (store.followUpRequest).
func (e *effector) doRequest(ctx context.Context, id string, t conversation.Transition) (*conversation.State, error) {
	ctx = answersRequest(ctx)
	var (
		effects []conversation.Effect
		applied *conversation.State
	)
	c, rev, err := e.store.updateFrom(ctx, id, nil, 0, func(c *conversation.State) error {
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
func (e *effector) create(ctx context.Context, c *conversation.State, effects []conversation.Effect) error {
	rev, err := e.store.create(ctx, c)
	if err != nil {
		return err
	}
	e.carryOut(ctx, c, rev, effects)
	return nil
}

// appendDeferred appends c, the state d's record makes or one its run
// changed further, as one record: a start as the conversation's first, a
// claim only if nothing was appended since the pause it was made from.
// What it asks for is carried out by d (tentative.go).
func (e *effector) appendDeferred(ctx context.Context, d *deferredAppend, c *conversation.State) (uint64, error) {
	if d.start() {
		// The start's client waits for this record.
		return e.store.create(answersRequest(ctx), c)
	}
	return e.store.commit(ctx, c, d.base, d.pauseRev)
}

// failTooLarge fails the conversation that a change would have taken over
// the store's limit, with the reason in its status and a run_failed event.
func (e *effector) failTooLarge(ctx context.Context, id string, tl *TooLargeError) {
	if _, _, err := e.doFrom(ctx, id, nil, 0, conversation.AbortTransition(tl.Error())); err != nil {
		e.log.ErrorContext(ctx, "fail a conversation too large to store", slog.String("conversation_id", id), slog.String("error", err.Error()))
	}
}

// startRun launches run runID of conversation convID from c (at rev; nil:
// read it), with its deferred record d if it has one. The event sink
// batches the conversation's events from the run's beginning to its end.
func (e *effector) startRun(convID, runID string, c *conversation.State, rev uint64, d *deferredAppend) {
	hooks := runHooks{
		began: func() { e.events.runBegan(convID, runID, false) },
		ended: func() { e.events.runEnded(convID, runID) },
	}
	if d != nil {
		hooks.began = d.began
	}
	e.launch(convID, runID, c, rev, d, hooks)
}

// carryOut carries out effects, which the write of c (at rev) asked for;
// jobs are the replies it recorded. c is handed over to a run it launches.
func (e *effector) carryOut(ctx context.Context, c *conversation.State, rev uint64, effects []conversation.Effect, jobs ...*replyJob) {
	for _, ef := range effects {
		e.carry(ctx, c, rev, ef, jobs)
	}
}

func (e *effector) carry(ctx context.Context, c *conversation.State, rev uint64, ef conversation.Effect, jobs []*replyJob) {
	id := c.ID
	switch ef.Kind {
	case conversation.EffectNotifyCancel:
		for _, r := range ef.Runs {
			if err := e.notifyCancel(r); err != nil {
				e.log.WarnContext(ctx, "cancel notice", slog.String("conversation_id", id), slog.String("run_id", r), slog.String("error", err.Error()))
			}
		}
	case conversation.EffectWithdraw:
		wctx := ctx
		if ef.Detached {
			wctx = context.WithoutCancel(ctx)
		}
		e.withdraw(wctx, id, ef.RunID, ef.Calls)
	case conversation.EffectExpired:
		for _, pc := range ef.Calls {
			e.observer.expired(string(pc.Kind))
		}
		e.log.InfoContext(ctx, "calls expired", slog.String("conversation_id", id), slog.Int("calls", len(ef.Calls)))
	case conversation.EffectEmit:
		e.events.publish(ctx, id, ef.RunID, ef.Event, ef.CallID, ef.Data)
	case conversation.EffectEscalate:
		for _, pc := range ef.Calls {
			e.escalate(ctx, c, pc)
		}
	case conversation.EffectBatchDone:
		e.batchDone(id, ef.RunID)
	case conversation.EffectClaim:
		e.claim(ctx, id)
	case conversation.EffectSchedule:
		e.deadlines.schedule(c)
	case conversation.EffectFollowUp:
		if !c.LeaseLive(e.clock()) {
			e.handOver(ctx, c)
			return
		}
		e.observer.followUp()
		e.log.InfoContext(ctx, "batch complete; follow-up claimed", slog.String("conversation_id", id),
			slog.String("paused_run_id", c.Batch.RunID), slog.String("run_id", ef.RunID))
		e.startRun(id, ef.RunID, c, rev, nil)
	case conversation.EffectRelaunch:
		e.observer.runRelaunched()
		e.log.InfoContext(ctx, "relaunching run", slog.String("conversation_id", id), slog.String("run_id", ef.RunID))
		e.startRun(id, ef.RunID, nil, 0, nil)
	case conversation.EffectStarted:
		e.observer.runStarted()
	case conversation.EffectLaunch:
		if ef.Read {
			e.startRun(id, ef.RunID, nil, 0, nil)
			return
		}
		e.startRun(id, ef.RunID, c, rev, nil)
	case conversation.EffectHandOver:
		e.handOver(ctx, c)
	case conversation.EffectPublishInline:
		if err := e.publishBatch(ctx, c); err != nil {
			// Not fatal: the calls stay unmarked and are published when
			// the run pauses.
			e.log.WarnContext(ctx, "inline: publish batch", slog.String("conversation_id", id), slog.String("error", err.Error()))
		}
	case conversation.EffectReplied:
		for _, j := range jobs {
			e.replied(ctx, id, j)
			close(j.done)
		}
	case conversation.EffectPublishDispatched:
		if e.dispatchUnpublished {
			return
		}
		// Off the replies' way (their record is stored: what is not
		// published is reconcile's to publish); the publication reads a
		// copy, c staying the caller's.
		conv := c.Clone()
		log := e.log.With(slog.String("conversation_id", id), slog.String("run_id", conv.Batch.RunID))
		// The closures capture fields, not ef: a captured ef would move
		// every effect carried out to the heap.
		callIDs := ef.CallIDs
		e.spawn(func() {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replyTimeout)
			defer cancel()
			if err := e.publishDispatched(pctx, conv, callIDs); err != nil {
				log.WarnContext(pctx, "publish approved calls: left to reconcile", slog.String("error", err.Error()))
			}
		})
	case conversation.EffectEndWritten:
		e.observer.endWritten()
	case conversation.EffectAudit:
		e.audit(ctx, id, ef.RunID, ef.Grants)
	case conversation.EffectIndex:
		if err := e.store.indexNow(ctx, id); err != nil {
			e.log.WarnContext(ctx, "index a conversation awaiting approval: left to its creator's next advert", slog.String("conversation_id", id), slog.String("error", err.Error()))
		}
	case conversation.EffectAwaitReplies:
		e.events.awaitReplies(id)
	case conversation.EffectPublishPaused:
		// Nothing on the calls' way waits for their acks: a worker gets a
		// call once the stream has stored it, whether or not this replica
		// has heard so, and a publish that fails is left to reconcile,
		// which publishes what is unmarked. The acks are awaited off the
		// run's path (and before Stop returns), then OnRunEnd is told; c
		// is not changed after this.
		runID := ef.RunID
		e.track(func() {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replyTimeout)
			defer cancel()
			if err := e.publishPaused(pctx, c); err != nil {
				e.log.WarnContext(pctx, "publish batch", slog.String("conversation_id", id), slog.String("run_id", runID), slog.String("error", err.Error()))
			}
			if e.onRunEnd != nil {
				e.onRunEnd(c)
			}
		})
	case conversation.EffectRunEnded:
		if e.onRunEnd != nil {
			e.onRunEnd(c)
		}
	case conversation.EffectLog:
		if !e.log.Enabled(ctx, ef.Level) {
			// Before the attributes are copied, which every line costs
			// whether or not it is written.
			return
		}
		attrs := append([]slog.Attr{slog.String("conversation_id", id)}, ef.Attrs...)
		e.log.LogAttrs(ctx, ef.Level, ef.Msg, attrs...)
	default:
		panic("orchestrator: effect " + ef.Kind.String() + " has no arm")
	}
}

// delete deletes conversation id (conversation.DeleteTransition) and
// carries out what its tombstone asks for, if the tombstone is this
// delete's: a conversation deleted already, by another replica meanwhile
// or by a delete that stopped half-way, answers ErrNotFound after the
// purge (conversation.PurgeEffects), which finishes what that one left. A
// purge that fails stops the effects after it, and is the answer: the
// delete asked again finishes it.
func (e *effector) delete(ctx context.Context, id string) error {
	var effects []conversation.Effect
	c, gone := e.store.delete(ctx, id, func(c *conversation.State) error {
		var err error
		effects, err = conversation.DeleteTransition()(c, e.clock())
		return err
	})
	switch {
	case errors.Is(gone, errDeleted):
		c, effects = &conversation.State{ID: id, Status: conversation.StatusDeleted}, conversation.PurgeEffects()
	case gone != nil:
		return gone
	}
	for _, ef := range effects {
		if ef.Kind != conversation.EffectPurge {
			e.carry(ctx, c, 0, ef, nil)
			continue
		}
		if err := e.store.purge(ctx, id, 1); err != nil {
			return err
		}
		// The events hold the history too.
		if err := e.events.purge(ctx, id); err != nil {
			return fmt.Errorf("delete conversation %s: its events: %w", id, err)
		}
	}
	return gone
}
