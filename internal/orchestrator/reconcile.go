package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
)

// reconcileLoop finishes the first pass over first (the due entries Start
// listed: Start does not wait for their reads, so that records that cannot
// be read or are slow to must not keep the API from coming up), then runs a
// pass every interval.
func (rc *reconciler) reconcileLoop(first []dueEntry) {
	ctx, cancel := context.WithCancel(rc.loopCtx)
	rc.reconcileEntries(ctx, first)
	cancel()
	t := newTicker(rc.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-rc.stopping:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(rc.loopCtx, rc.cfg.ReconcileInterval)
		if err := rc.reconcile(ctx); err != nil {
			rc.log.WarnContext(ctx, "reconcile", slog.String("error", err.Error()))
		}
		cancel()
	}
}

// Reconcile runs one reconcile pass now, as the loop does every
// ReconcileInterval: for tests and the benchmark harness, which times it.
// Conversations it had to leave are logged and counted (Stats), not
// returned.
func (o *Orchestrator) Reconcile(ctx context.Context) error { return o.rec.reconcile(ctx) }

// reconcile goes over the conversations that are not finished (the due
// entries of the index, so that its cost does not grow with the finished
// ones) and does what a crash or a replica that went away may have left
// undone: publish a batch's unmarked calls, claim a batch that became
// complete, settle calls past their deadline, relaunch a run whose lease
// expired; and it rebuilds the deadline index. The entry of a conversation
// found finished or deleted is removed.
func (rc *reconciler) reconcile(ctx context.Context) error {
	rc.observer.reconcileStarted()
	defer rc.observer.reconcileEnded()
	due, err := rc.store.due(ctx)
	if err != nil {
		return err
	}
	rc.pub.stored.prune(rc.clock().Add(-storedRunsKeep))
	rc.reconcileEntries(ctx, due)
	return ctx.Err()
}

// reconcileEntries reconciles each of due in turn. The entries of
// conversations that have finished (or are gone) are told apart first from
// the last record of each log, summaryChunk logs a request, and removed
// without their logs being read: after many conversations finish at once,
// a pass costs a few requests for them, not a read of each.
//
// A conversation whose state is cached here unfinished is reconciled from
// that state without its last record being read, as reconcileOne does in
// any case: with 100,000 paused conversations each pass read 100,000 last
// records to learn what the cache said (with the server's direct gets,
// about 7 % of the CPU of a resume of them going on meanwhile). Should
// another replica have finished it, the stale state costs a refused append
// and a catch-up when it is acted on (its deadline, a claim, a relaunch),
// which removes its entry then.
func (rc *reconciler) reconcileEntries(ctx context.Context, due []dueEntry) {
	for i := 0; i < len(due); i += summaryChunk {
		chunk := due[i:min(i+summaryChunk, len(due))]
		var open, unknown []dueEntry
		for _, e := range chunk {
			if rc.store.cache.unfinished(e.id) {
				open = append(open, e)
			} else {
				unknown = append(unknown, e)
			}
		}
		if len(unknown) > 0 {
			ids := make([]string, len(unknown))
			for j, e := range unknown {
				ids[j] = e.id
			}
			sums, err := rc.store.summaries(ctx, ids)
			if err != nil {
				// Each is read on its own below, as if nothing was known.
				rc.log.WarnContext(ctx, "reconcile: read the last records", slog.String("error", err.Error()))
				open = append(open, unknown...)
			} else {
				open = append(open, rc.dropFinished(ctx, unknown, sums)...)
			}
		}
		rc.reconcileEach(ctx, open)
	}
}

// dropFinished removes the due entries of the conversations whose last
// record says they finished, and returns the others.
func (rc *reconciler) dropFinished(ctx context.Context, due []dueEntry, sums []ConversationSummary) []dueEntry {
	status := make(map[string]conversation.Status, len(sums))
	for _, s := range sums {
		status[s.ID] = s.Status
	}
	var (
		open []dueEntry
		wg   sync.WaitGroup
		sem  = make(chan struct{}, undueInFlight)
	)
	for _, e := range due {
		st, ok := status[e.id]
		// No last record is no log, or a last record the server cannot
		// load (damaged on disk): reading the log tells them apart.
		if !ok || !st.Terminal() && st != conversation.StatusDeleted {
			open = append(open, e)
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := rc.store.undue(ctx, e); err != nil && ctx.Err() == nil {
				rc.log.WarnContext(ctx, "reconcile: remove the entry of a finished conversation", slog.String("conversation_id", e.id), slog.String("error", err.Error()))
			}
		})
	}
	wg.Wait()
	return open
}

// reconcileEach reconciles each of due in turn.
func (rc *reconciler) reconcileEach(ctx context.Context, due []dueEntry) {
	for _, e := range due {
		if rc.stopped.Load() {
			break
		}
		// One conversation that cannot be read or brought forward (a
		// corrupt record, a failing write) costs only itself: it is logged
		// and counted, and the pass goes on to the others.
		if err := rc.reconcileOne(ctx, e); err != nil && ctx.Err() == nil {
			rc.observer.reconcileError()
			rc.storage.failed(err) // health reports a store without room
			rc.log.ErrorContext(ctx, "reconcile: conversation left as it is", slog.String("conversation_id", e.id), slog.String("error", err.Error()))
		}
	}
}

func (rc *reconciler) reconcileOne(ctx context.Context, e dueEntry) error {
	id := e.id
	// The cached state, when there is one: acting on a stale one costs a
	// refused append and a catch-up, never a wrong change, since every
	// change goes through the store's expected-sequence append; and a pass
	// over many paused conversations then reads none of them.
	c, err := rc.store.peek(ctx, id) // not to be changed: copied where it is handed on
	if errors.Is(err, ErrNotFound) {
		if e.fresh {
			return nil
		}
		return rc.store.undue(ctx, e)
	}
	if err != nil {
		return err
	}
	if c.Status.Terminal() {
		return rc.store.undue(ctx, e)
	}
	now := rc.clock()
	switch c.Status {
	case conversation.StatusPaused:
		if c.Batch == nil {
			return nil
		}
		if unpublished(c.Batch) && rc.publishDue(c, now) {
			if err := rc.pub.publishBatch(ctx, c.Clone()); err != nil {
				return err
			}
		}
		if c.Batch.Complete() {
			rc.pub.batchDone(id, c.Batch.RunID)
			rc.fx.claim(ctx, id)
			return nil
		}
		if next := c.Batch.NextDeadline(); !next.After(now) {
			rc.expire(ctx, id)
			return nil
		}
		rc.deadlines.schedule(c)
	case conversation.StatusRunning, conversation.StatusResuming:
		if c.Lease == nil || !c.Lease.Until.After(now) {
			if ok, _ := rc.roster.mayRun(c); !ok {
				return rc.awaitAgent(ctx, c.Clone())
			}
			rc.fx.relaunch(ctx, id)
			return nil
		}
		rc.deadlines.schedule(c)
	}
	return nil
}

// publishAfterMax bounds how long reconcile leaves a paused run's batch to
// the run (publishDue).
const publishAfterMax = 30 * time.Second

// storedRunsKeep is how long a run's entry is kept untaken.
const storedRunsKeep = 2 * publishAfterMax

// publishDue says whether reconcile is to publish and mark the unmarked
// calls of c's batch now. A paused run publishes its batch itself and
// marks nothing (a reply marks its call); marking the batch at once would
// be one more write racing the replies on their way, each of which it met
// would cost a refused append and a catch-up. So reconcile leaves the
// batch to its run for a reconcile interval (at most publishAfterMax)
// after the pause: then it publishes what is still unmarked under the same
// message ids, which the stream drops as repeats of what the run
// published, and marks it. That is well within the stream's duplicate
// window (2 minutes), after which a publication would be a new message
// and a call delivered twice.
//
// A call dispatched once approved (conversation.State.Dispatch) is left to its
// dispatcher the same while, from its dispatch.
func (rc *reconciler) publishDue(c *conversation.State, now time.Time) bool {
	rec := c.RunRecord(c.Batch.RunID)
	if rec == nil || rec.EndedAt.IsZero() {
		return true
	}
	since := rec.EndedAt
	for _, pc := range c.Batch.Calls {
		if pc.Unmarked() && pc.Dispatched() && pc.PublishedAt.After(since) {
			since = pc.PublishedAt
		}
	}
	return !now.Before(since.Add(min(rc.cfg.ReconcileInterval, publishAfterMax)))
}

func unpublished(b *conversation.Batch) bool {
	return slices.ContainsFunc(b.Calls, (*conversation.PendingCall).Unmarked)
}

// unmarkedIDs are the ids of b's unmarked calls.
func unmarkedIDs(b *conversation.Batch) []string {
	var ids []string
	for _, pc := range b.Calls {
		if pc.Unmarked() {
			ids = append(ids, pc.ToolCallID)
		}
	}
	return ids
}

// awaitAgent handles a conversation that needs a run this replica may not
// give it. If a live replica runs its agent (with its digest, or with
// another that adopts it once no replica advertises the old one), that
// replica's reconcile takes it. If none does, the conversation says so
// (Unserved in its state, an agent_unavailable event) and fails after
// Config.AgentWait: it must not wait silently for an agent nobody runs.
// Every replica's reconcile does this, so it happens while any is up.
func (rc *reconciler) awaitAgent(ctx context.Context, c *conversation.State) error {
	now := rc.clock()
	for _, n := range rc.roster.replicas.names(now) {
		if n == c.Agent {
			// Nudged again at every pass while it waits: a nudge is a
			// core NATS message, lost if no replica of the agent listened
			// at that moment, and a replica whose cache holds the
			// conversation as it was before the hand-over would not see
			// it in its own reconcile.
			rc.fx.handOver(ctx, c)
			return nil
		}
	}
	reason := fmt.Sprintf("no replica runs agent %q", c.Agent)
	// The event goes out only after the write that notes (or fails) the
	// wait, which a later pass finds and takes as done: a write cut short
	// by the pass's deadline is followed up by the store until the log says
	// whether it was stored (store.appendLog).
	_, _, err := rc.fx.do(ctx, c.ID, conversation.WaitForAgentTransition(reason, rc.cfg.AgentWait))
	return err
}

// adoptOrphans takes over what dead replicas left unindexed: the
// conversations of each advert in dead (by key, with its revision), then
// deletes the advert if it did not change meanwhile. Those found are
// reconciled at once rather than at the next pass.
func (l *replicaLink) adoptOrphans(ctx context.Context, dead []deadAdvert) {
	for _, d := range dead {
		var open []dueEntry
		if d.advert.Watermark != nil {
			var err error
			open, err = l.store.adopt(ctx, d.advert.Instance, *d.advert.Watermark)
			if err != nil {
				if ctx.Err() == nil {
					l.log.WarnContext(ctx, "adopt the conversations of a replica that is gone", slog.String("replica", d.advert.Instance), slog.String("error", err.Error()))
				}
				continue
			}
		}
		if d.revision > 0 {
			if err := l.kv.Delete(ctx, d.key, d.revision); err != nil && ctx.Err() == nil {
				l.log.DebugContext(ctx, "delete the advert of a replica that is gone", slog.String("key", d.key), slog.String("error", err.Error()))
			}
		}
		if len(open) == 0 {
			continue
		}
		l.log.InfoContext(ctx, "conversations of a replica that is gone indexed", slog.String("replica", d.advert.Instance), slog.Int("conversations", len(open)))
		l.reconcileEntries(ctx, open)
	}
}

// deadAdvert is the advert of a replica that is gone, under key at
// revision (0: this replica's own, from before its start, not stored any
// more).
type deadAdvert struct {
	key      string
	revision uint64
	advert   replicaAdvert
}

// maxExpiryNap bounds the expiry loop's sleep, so a clock that jumps is
// noticed.
const maxExpiryNap = time.Minute

func (rc *reconciler) expiryLoop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		nap := maxExpiryNap
		if t := rc.deadlines.earliest(); !t.IsZero() {
			nap = min(max(t.Sub(rc.clock()), 0), maxExpiryNap)
		}
		timer.Reset(nap)
		select {
		case <-rc.stopping:
			return
		case <-rc.deadlines.wake:
		case <-timer.C:
		}
		for _, id := range rc.deadlines.due(rc.clock()) {
			ctx, cancel := context.WithTimeout(rc.loopCtx, replyTimeout)
			rc.expire(ctx, id)
			cancel()
		}
	}
}

// expire settles the conversation's pending calls whose deadline has passed,
// through the same CAS path as replies, withdraws the external ones from the
// work queue, then completes the batch if that made it complete (D37).
func (rc *reconciler) expire(ctx context.Context, convID string) {
	if _, _, err := rc.fx.do(ctx, convID, conversation.ExpireTransition()); err != nil {
		rc.log.WarnContext(ctx, "expire calls", slog.String("conversation_id", convID), slog.String("error", err.Error()))
		// Try again at the next reconcile, which reschedules it.
	}
}
