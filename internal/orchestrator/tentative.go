package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
)

// A run whose start is not stored yet: the effector deferring an append.
// The replies that complete a
// paused batch are recorded with the batch's claim in one append, and the
// follow-up's end in another; for a follow-up that ends quickly (a
// scripted or local model, a model answering at once) the two become one.
// The follow-up runs from the claimed state while that state is only in
// memory, and the replies wait unacknowledged. When the run ends within
// claimWindow, before doing anything with effects outside it, the replies,
// the claim and the run's end are appended as one record, under the
// sequence of the paused state the run started from. Otherwise the claim
// is stored as it would have been (at claimWindow, or before the run's
// first tool or handler runs: agent.RunInput.BeforeEffects), and the run
// goes on as any other. What the deferred record asks for (the replies'
// events and acknowledgements) is carried out once it is stored, and the
// run's own events, which the event sink keeps apart meanwhile, go after
// them (eventSink.settleRun).
//
// A new conversation's first run starts the same way: its first record
// waits while the run goes on, and a run that pauses (or ends) within the
// window is stored with it as one record, under an empty log; the start is
// answered once what holds it is stored.
//
// Exactly-once is kept by the expected sequence: the record is written only
// if nothing was appended to the conversation since its pause (or at all,
// for a start), so no other replica can have claimed the batch, cancelled
// the conversation or recorded anything the run did not see. If something
// was, the run is dropped with the events it emitted (eventSink.dropRun);
// a follow-up's replies are recorded again from the stored state as if no
// run had started, which launches the follow-up anew if the batch is still
// this replica's to claim, and a start is answered with the error. A
// replica that dies meanwhile has acknowledged no reply: they are
// delivered again, and the follow-up runs where they land; a start it had
// not answered is not stored.

type deferredState int

const (
	deferredOpen    deferredState = iota // record not stored, run going
	deferredStored                       // claim (or start) stored; the run goes on as any other
	deferredEnded                        // the run's end stored with it
	deferredDropped                      // something came first; run and events dropped
)

// errDeferredDropped ends a run whose deferred record could not be stored.
var errDeferredDropped = errors.New("run dropped: the conversation changed before what it started from was stored")

// deferredAppend is the record of a follow-up's claim, or of a new
// conversation's start, whose run goes on before it is stored. The
// effector makes it (deferClaim, deferStart) and stores it; the runner
// only says when it must be stored now (store), that the run stops
// (abandon), and hands the run's end to the effector (doRun).
type deferredAppend struct {
	fx     *effector
	convID string
	runID  string
	// base is the paused state's fingerprint, at pauseRev: what the
	// record of the claim (or of the claim and the end) is a change of.
	// A start has none: its record is the conversation's first.
	base     *conversation.Fingerprint
	pauseRev uint64
	// claimed is the state the claim (or the start) makes (not to be
	// changed).
	claimed *conversation.State
	// jobs are the replies the record holds: their events and their
	// acknowledgement wait for it (conversation.EffectReplied); if it cannot be
	// stored, they are recorded again from the stored state.
	jobs  []*replyJob
	timer *time.Timer

	mu        sync.Mutex
	state     deferredState
	claimRev  uint64
	cancelRun context.CancelFunc
	// err is why a start was dropped: what the start answers.
	err error
	// settled is closed once the state is no longer open.
	settled chan struct{}

	// sinkMu orders the run's beginning (under the runner's launch lock)
	// with the record's outcome (under mu), without one lock under the
	// other: inSink says the event sink keeps the run's events apart,
	// outcome whether the record was stored or dropped meanwhile.
	sinkMu  sync.Mutex
	inSink  bool
	outcome deferredState
}

// start reports whether d is a new conversation's start.
func (d *deferredAppend) start() bool { return d.base == nil }

// deferClaim launches the follow-up of the batch jobs complete in paused
// (the stored state, at rev) before the claim is stored. claimed is paused
// with the jobs applied and the batch claimed for followUp by this
// replica, ready to run; it is handed over to the run.
func (e *effector) deferClaim(paused *conversation.State, rev uint64, claimed *conversation.State, followUp string, jobs []*replyJob) {
	d := &deferredAppend{
		fx: e, convID: paused.ID, runID: followUp,
		base: conversation.FingerprintOf(paused), pauseRev: rev,
		claimed: claimed.Clone(), jobs: jobs, settled: make(chan struct{}),
	}
	e.launchDeferred(d, claimed)
}

// deferStart is the deferred first record of c, a new conversation whose
// lease this replica holds, with its first run runID; launchDeferred
// launches it.
func (e *effector) deferStart(c *conversation.State, runID string) *deferredAppend {
	return &deferredAppend{fx: e, convID: c.ID, runID: runID, claimed: c.Clone(), settled: make(chan struct{})}
}

// launchDeferred launches d's run from c before d is stored, and arms the
// window at whose end it is stored.
func (e *effector) launchDeferred(d *deferredAppend, c *conversation.State) {
	// Counted as it begins, so that the count is there before anything of
	// the run is seen; a dropped one is uncounted.
	if d.start() {
		e.observer.runStarted()
	} else {
		e.observer.followUp()
	}
	d.arm()
	e.startRun(d.convID, d.runID, c, d.pauseRev, d)
}

// answer is what a deferred start answers once settled: nil once stored.
func (d *deferredAppend) answer() error {
	<-d.settled
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == deferredDropped {
		return d.err
	}
	return nil
}

// arm starts the window at whose end the record is stored.
func (d *deferredAppend) arm() {
	// Set under the lock its callback takes: a window of a millisecond can
	// end before AfterFunc returns.
	d.mu.Lock()
	defer d.mu.Unlock()
	d.timer = time.AfterFunc(d.fx.claimWindow, func() {
		sctx, cancel := context.WithTimeout(d.fx.runCtx, replyTimeout)
		defer cancel()
		_ = d.store(sctx)
	})
}

// began says the run began (the runner accepted it): the event sink keeps
// its events apart while the record is open.
func (d *deferredAppend) began() {
	d.sinkMu.Lock()
	defer d.sinkMu.Unlock()
	if d.outcome == deferredOpen {
		d.fx.events.runBegan(d.convID, d.runID, true)
		d.inSink = true
		return
	}
	// Stored already: its events go as any run's. (Dropped: it stops
	// before it emits any.)
	d.fx.events.runBegan(d.convID, d.runID, false)
}

// resolve tells the event sink what became of the record: the run's events
// go on (stored) or are forgotten (dropped).
func (d *deferredAppend) resolve(st deferredState) {
	d.sinkMu.Lock()
	defer d.sinkMu.Unlock()
	d.outcome = st
	if !d.inSink {
		return
	}
	if st == deferredDropped {
		d.fx.events.dropRun(d.convID, d.runID)
		return
	}
	d.fx.events.settleRun(d.convID, d.runID)
}

// store stores the record, unless the run has ended or was dropped: nil
// once it is stored, errDeferredDropped if it cannot be.
func (d *deferredAppend) store(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.state {
	case deferredStored:
		return nil
	case deferredOpen:
	default:
		return errDeferredDropped
	}
	d.timer.Stop()
	seq, err := d.fx.appendDeferred(ctx, d, d.claimed)
	if err != nil {
		d.dropLocked(ctx, err)
		return errDeferredDropped
	}
	d.claimRev = seq
	d.settleLocked(ctx, deferredStored)
	return nil
}

// doRun stores the end of run runID, which end makes: with d's record as
// one, if d is still open; else from the state the run started from (from,
// at rev) or from d's stored claim. It returns the state stored, or
// errDeferredDropped when the run is to be forgotten.
func (e *effector) doRun(ctx context.Context, convID string, from *conversation.State, rev uint64, d *deferredAppend, end conversation.Transition) (*conversation.State, uint64, error) {
	if d != nil {
		c, effects, done, dropped, cfrom, crev := d.end(ctx, end)
		switch {
		case dropped:
			return nil, 0, errDeferredDropped
		case done:
			e.carryOut(ctx, c, 0, effects)
			return c, 0, nil
		}
		from, rev = cfrom, crev
	}
	return e.doFrom(ctx, convID, from, rev, end)
}

// end stores the run's end, which end makes in the claimed state, with
// the claim in one record if the claim is not stored yet. It reports
// whether it did (c: the state stored, effects: what its end asks for,
// for the caller to carry out); if not, the caller stores the end as usual
// from the stored claim (from, at rev), unless dropped is set: the run is
// to be forgotten.
func (d *deferredAppend) end(ctx context.Context, end conversation.Transition) (c *conversation.State, effects []conversation.Effect, done, dropped bool, from *conversation.State, rev uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.state {
	case deferredStored:
		return nil, nil, false, false, d.claimed.Clone(), d.claimRev
	case deferredOpen:
	default:
		return nil, nil, false, true, nil, 0
	}
	d.timer.Stop()
	c = d.claimed.Clone()
	effects, err := end(c, d.fx.clock())
	if err == nil {
		// Counted before the record can be seen.
		d.fx.observer.storedWithEnd(d.start(), 1)
		if _, err = d.fx.appendDeferred(ctx, d, c); err != nil {
			d.fx.observer.storedWithEnd(d.start(), -1)
		}
		if tooLarge(err) != nil {
			// What the run ended with does not fit with the rest: the claim
			// is stored alone, and the caller stores the end as it would
			// have (failing the run).
			seq, cerr := d.fx.appendDeferred(ctx, d, d.claimed)
			if cerr == nil {
				d.claimRev = seq
				d.settleLocked(ctx, deferredStored)
				return nil, nil, false, false, d.claimed.Clone(), seq
			}
			err = cerr
		}
	}
	if err != nil {
		d.dropLocked(ctx, err)
		return nil, nil, false, true, nil, 0
	}
	d.settleLocked(ctx, deferredEnded)
	return c, effects, true, false, nil, 0
}

// abandon drops the run without recording the replies: they are nakked,
// and delivered again (the orchestrator stops); a start is answered with
// err. It reports whether the record was still open.
func (d *deferredAppend) abandon(err error) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state != deferredOpen {
		return false
	}
	d.timer.Stop()
	d.state = deferredDropped
	d.err = err
	d.fx.observer.runUncounted(d.start())
	d.resolve(deferredDropped)
	for _, j := range d.jobs {
		j.err = ErrStopped
		close(j.done)
	}
	close(d.settled)
	return true
}

// dropped reports whether the run was dropped.
func (d *deferredAppend) dropped() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.state == deferredDropped
}

// setCancel gives d the run's cancel, which dropping it calls; it reports
// false if it was dropped already.
func (d *deferredAppend) setCancel(cancel context.CancelFunc) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cancelRun = cancel
	return d.state != deferredDropped
}

// settleLocked ends the open state with the record stored: what it asks
// for is carried out (the replies' events, then their acknowledgement),
// then what the run emitted goes out, behind them.
func (d *deferredAppend) settleLocked(ctx context.Context, st deferredState) {
	d.state = st
	if !d.start() {
		d.fx.log.InfoContext(ctx, "batch complete; follow-up claimed", slog.String("conversation_id", d.convID),
			slog.String("paused_run_id", d.claimed.Batch.RunID), slog.String("run_id", d.runID), slog.Bool("with_end", st == deferredEnded))
	}
	if len(d.jobs) > 0 {
		d.fx.carryOut(ctx, d.claimed, 0, []conversation.Effect{{Kind: conversation.EffectReplied}}, d.jobs...)
	}
	d.resolve(st)
	close(d.settled)
}

// dropLocked forgets the run and its events, and records the replies
// again from the stored state.
func (d *deferredAppend) dropLocked(ctx context.Context, err error) {
	d.state = deferredDropped
	d.err = err
	d.fx.observer.runUncounted(d.start())
	d.resolve(deferredDropped)
	if d.cancelRun != nil {
		d.cancelRun()
	}
	close(d.settled)
	d.fx.observer.tentativeDropped()
	if d.start() {
		d.fx.log.InfoContext(ctx, "start not stored; its run dropped", slog.String("conversation_id", d.convID),
			slog.String("run_id", d.runID), slog.String("reason", err.Error()))
		return
	}
	d.fx.log.InfoContext(ctx, "follow-up dropped before its claim was stored; replies recorded again", slog.String("conversation_id", d.convID),
		slog.String("run_id", d.runID), slog.String("reason", err.Error()))
	// Not the dropped run's context, which is cancelled.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replyTimeout)
	defer cancel()
	d.fx.reapply(rctx, d.convID, d.jobs)
}
