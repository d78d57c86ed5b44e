package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
)

// A run whose start is not stored yet. The replies that complete a
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
// goes on as any other.
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
// was, the run is dropped with the events it emitted (held until then);
// a follow-up's replies are recorded again from the stored state as if no
// run had started, which launches the follow-up anew if the batch is still
// this replica's to claim, and a start is answered with the error. A
// replica that dies meanwhile has acknowledged no reply: they are
// delivered again, and the follow-up runs where they land; a start it had
// not answered is not stored.

// claimWindow is how long a run may go on before what it starts from is
// stored (a follow-up's claim, a new conversation's start), by default
// (Config.ClaimWindow). It bounds how long the completing replies wait for
// their acknowledgement, and a start for its answer; the run's lease is
// not renewed before its claim is stored, which a window far below a third
// of the lease makes no matter.
const claimWindow = 50 * time.Millisecond

type tentativeState int

const (
	tentativeOpen    tentativeState = iota // claim not stored, run going
	tentativeStored                        // claim stored; the run goes on as any other
	tentativeEnded                         // the run's end stored with the claim
	tentativeDropped                       // something came first; run and events dropped
)

// errTentativeDropped ends a run whose tentative claim could not be stored.
var errTentativeDropped = errors.New("run dropped: the conversation changed before what it started from was stored")

// tentativeClaim is the claim of a follow-up, or the start of a new
// conversation, whose run goes on before it is stored.
type tentativeClaim struct {
	co     *core
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
	jobs    []*replyJob
	// reapply records jobs from the stored state, when the run is dropped
	// (the reply pipeline's).
	reapply func(ctx context.Context, convID string, jobs []*replyJob)
	events  *eventHold
	timer   *time.Timer

	mu        sync.Mutex
	state     tentativeState
	claimRev  uint64
	cancelRun context.CancelFunc
	// err is why a start was dropped: what the start answers.
	err error
	// settled is closed once the state is no longer open.
	settled chan struct{}
}

// start reports whether tc is a new conversation's start.
func (tc *tentativeClaim) start() bool { return tc.base == nil }

// write appends c, the claimed state or one the run changed further, as
// one record.
func (tc *tentativeClaim) write(ctx context.Context, c *conversation.State) (uint64, error) {
	if tc.start() {
		// The start's client waits for this record.
		return tc.co.store.create(answersRequest(ctx), c)
	}
	return tc.co.store.commit(ctx, c, tc.base, tc.pauseRev)
}

// counter is what counts tc's runs: started, or followed up.
func (tc *tentativeClaim) counter() *atomic.Int64 {
	if tc.start() {
		return &tc.co.stats.RunsStarted
	}
	return &tc.co.stats.FollowUps
}

// arm starts the window at whose end the claim is stored.
func (tc *tentativeClaim) arm() {
	// Set under the lock its callback takes: a window of a millisecond can
	// end before AfterFunc returns.
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.timer = time.AfterFunc(tc.co.cfg.ClaimWindow, func() {
		sctx, cancel := context.WithTimeout(tc.co.runCtx, replyTimeout)
		defer cancel()
		_ = tc.storeClaim(sctx)
	})
}

// startTentative launches the first run of c, a new conversation whose
// lease this replica holds, before c is stored, and returns once its first
// record is stored (alone, or with the run's pause or end) or cannot be:
// errExists (wrapped) when the conversation was there before, ErrStopped
// when the orchestrator stopped first, or the append's error.
func (o *Orchestrator) startTentative(c *conversation.State, runID string) error {
	tc := &tentativeClaim{
		co: o.core, convID: c.ID, runID: runID, claimed: c.Clone(),
		events: o.events.newHold(), settled: make(chan struct{}),
	}
	// A start of the same conversation going on here (a retry with the
	// same idempotency key) is waited for: the conversation is there once
	// it is stored.
	for {
		prev, loaded := o.starting.LoadOrStore(c.ID, tc)
		if !loaded {
			break
		}
		p := prev.(*tentativeClaim)
		<-p.settled
		if !p.dropped() {
			return fmt.Errorf("start conversation %s: %w", c.ID, errExists)
		}
		// Dropped (stopped, or refused): this one takes its place, unless
		// another retry did first.
		if o.starting.CompareAndSwap(c.ID, p, tc) {
			break
		}
	}
	defer o.starting.CompareAndDelete(c.ID, tc)
	// Counted before anything of the run can be seen.
	o.stats.RunsStarted.Add(1)
	tc.arm()
	o.runner.launchFrom(c.ID, runID, c, 0, tc)
	// Not bounded by the caller's context: the run goes on, and the start
	// is stored within the window and an append's timeout, whether or not
	// anyone waits for its answer.
	<-tc.settled
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.state == tentativeDropped {
		return tc.err
	}
	return nil
}

// tentative starts the follow-up of the batch jobs complete in paused (the
// stored state, at rev) before the claim is stored, and reports whether
// it did; if not, the caller records the jobs as usual. claimed is paused
// with the jobs applied and the batch claimed for followUp by this
// replica, ready to run.
func (rp *replyPipeline) tentative(ctx context.Context, paused *conversation.State, rev uint64, claimed *conversation.State, followUp string, jobs []*replyJob) bool {
	if rp.cfg.ClaimWindow < 0 || !claimed.LeaseLive(rp.clock()) || rp.stopped.Load() {
		return false
	}
	tc := &tentativeClaim{
		co: rp.core, convID: paused.ID, runID: followUp,
		base: conversation.FingerprintOf(paused), pauseRev: rev,
		claimed: claimed.Clone(), jobs: jobs,
		reapply: func(ctx context.Context, convID string, jobs []*replyJob) { rp.applyGroup(ctx, convID, jobs, nil, 0) },
		events:  rp.events.newHold(), settled: make(chan struct{}),
	}
	// Counted as it begins, so that the count is there before anything of
	// the follow-up is seen; a dropped one is uncounted before the replies
	// are recorded again.
	rp.stats.FollowUps.Add(1)
	hctx := withEventHold(ctx, tc.events)
	for _, j := range jobs {
		rp.replyEvents(hctx, paused.ID, j)
	}
	tc.arm()
	rp.launchTentative(claimed, tc)
	return true
}

// storeClaim stores the claim, unless the run has ended or was dropped:
// nil once it is stored, errTentativeDropped if it cannot be.
func (tc *tentativeClaim) storeClaim(ctx context.Context) error {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	switch tc.state {
	case tentativeStored:
		return nil
	case tentativeOpen:
	default:
		return errTentativeDropped
	}
	tc.timer.Stop()
	seq, err := tc.write(ctx, tc.claimed)
	if err != nil {
		tc.dropLocked(ctx, err)
		return errTentativeDropped
	}
	tc.claimRev = seq
	tc.settleLocked(ctx, tentativeStored)
	return nil
}

// end stores the run's end, which end makes in the claimed state, with
// the claim in one record if the claim is not stored yet. It reports
// whether it did (c: the state stored, effects: what its end asks for,
// for the caller to carry out); if not, the caller stores the end as usual
// from the stored claim (from, at rev), unless dropped is set: the run is
// to be forgotten.
func (tc *tentativeClaim) end(ctx context.Context, end conversation.Transition) (c *conversation.State, effects []conversation.Effect, done, dropped bool, from *conversation.State, rev uint64) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	switch tc.state {
	case tentativeStored:
		return nil, nil, false, false, tc.claimed.Clone(), tc.claimRev
	case tentativeOpen:
	default:
		return nil, nil, false, true, nil, 0
	}
	tc.timer.Stop()
	c = tc.claimed.Clone()
	effects, err := end(c, tc.co.clock())
	if err == nil {
		// Counted before the record can be seen.
		merged := &tc.co.stats.ClaimedWithEnd
		if tc.start() {
			merged = &tc.co.stats.StartedWithEnd
		}
		merged.Add(1)
		if _, err = tc.write(ctx, c); err != nil {
			merged.Add(-1)
		}
		if tooLarge(err) != nil {
			// What the run ended with does not fit with the rest: the claim
			// is stored alone, and the caller stores the end as it would
			// have (failing the run).
			seq, cerr := tc.write(ctx, tc.claimed)
			if cerr == nil {
				tc.claimRev = seq
				tc.settleLocked(ctx, tentativeStored)
				return nil, nil, false, false, tc.claimed.Clone(), seq
			}
			err = cerr
		}
	}
	if err != nil {
		tc.dropLocked(ctx, err)
		return nil, nil, false, true, nil, 0
	}
	tc.settleLocked(ctx, tentativeEnded)
	return c, effects, true, false, nil, 0
}

// abandon drops the run without recording the replies: they are nakked,
// and delivered again (the orchestrator stops); a start is answered with
// err. It reports whether the claim was still open.
func (tc *tentativeClaim) abandon(err error) bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.state != tentativeOpen {
		return false
	}
	tc.timer.Stop()
	tc.state = tentativeDropped
	tc.err = err
	tc.counter().Add(-1)
	tc.events.drop()
	for _, j := range tc.jobs {
		j.err = ErrStopped
		close(j.done)
	}
	close(tc.settled)
	return true
}

// dropped reports whether the run was dropped.
func (tc *tentativeClaim) dropped() bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.state == tentativeDropped
}

// setCancel gives the claim the run's cancel, which dropping it calls; it
// reports false if it was dropped already.
func (tc *tentativeClaim) setCancel(cancel context.CancelFunc) bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.cancelRun = cancel
	return tc.state != tentativeDropped
}

// settleLocked ends the open state with the claim stored: the replies are
// acknowledged and what was held of the events goes out.
func (tc *tentativeClaim) settleLocked(ctx context.Context, st tentativeState) {
	tc.state = st
	if !tc.start() {
		tc.co.log.InfoContext(ctx, "batch complete; follow-up claimed", slog.String("conversation_id", tc.convID),
			slog.String("paused_run_id", tc.claimed.Batch.RunID), slog.String("run_id", tc.runID), slog.Bool("with_end", st == tentativeEnded))
	}
	tc.events.flush()
	for _, j := range tc.jobs {
		close(j.done)
	}
	close(tc.settled)
}

// dropLocked forgets the run and its events, and records the replies
// again from the stored state.
func (tc *tentativeClaim) dropLocked(ctx context.Context, err error) {
	tc.state = tentativeDropped
	tc.err = err
	tc.counter().Add(-1)
	tc.events.drop()
	if tc.cancelRun != nil {
		tc.cancelRun()
	}
	close(tc.settled)
	tc.co.stats.TentativeDropped.Add(1)
	if tc.start() {
		tc.co.log.InfoContext(ctx, "start not stored; its run dropped", slog.String("conversation_id", tc.convID),
			slog.String("run_id", tc.runID), slog.String("reason", err.Error()))
		return
	}
	tc.co.log.InfoContext(ctx, "follow-up dropped before its claim was stored; replies recorded again", slog.String("conversation_id", tc.convID),
		slog.String("run_id", tc.runID), slog.String("reason", err.Error()))
	// ctx may be the dropped run's, whose events go nowhere: the replies'
	// events are published.
	rctx, cancel := context.WithTimeout(withEventHold(context.WithoutCancel(ctx), nil), replyTimeout)
	defer cancel()
	tc.reapply(rctx, tc.convID, tc.jobs)
}
