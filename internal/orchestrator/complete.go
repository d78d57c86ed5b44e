package orchestrator

import (
	"context"
	"log/slog"
	"time"
)

// afterApply moves a conversation on after one of its calls was settled: a
// complete batch is claimed and followed up, an incomplete one is
// rescheduled for expiry.
func (rp *replyPipeline) afterApply(ctx context.Context, c *Conversation) {
	if c == nil || c.Batch == nil {
		return
	}
	if c.Status == StatusPaused && !c.Batch.Inline && c.Batch.complete() {
		rp.batchDone(c.ID, c.Batch.RunID)
		rp.runner.claim(ctx, c.ID)
		return
	}
	rp.deadlines.schedule(c)
}

// batchDone forgets what this replica keeps in memory about the batch of
// run runID of convID, now complete: its deadline and that its calls were
// seen stored (nothing of it is left to expire or to mark). Kept, each
// stayed until due (ten minutes, a minute) after its conversation had
// finished, growing with the rate of calls. A batch answered before this
// replica saw its calls' acks is remembered as stored after this, and
// forgotten by reconcile's prune, as before.
func (co *core) batchDone(convID, runID string) {
	co.deadlines.forget(convID)
	co.pub.stored.take(runID)
}

// claim takes a complete batch for its follow-up: one CAS moves the
// conversation from paused to resuming, picks the follow-up run id and
// takes the lease, so exactly one replica (or restart) launches the
// follow-up (D35). It reports whether this call claimed it.
func (rn *runner) claim(ctx context.Context, convID string) bool {
	var followUp string
	c, rev, err := rn.store.updateFrom(ctx, convID, nil, 0, func(c *Conversation) error {
		followUp = rn.claimIn(c, rn.clock())
		if followUp == "" {
			return errUnchanged
		}
		return nil
	})
	if tl := tooLarge(err); tl != nil {
		rn.failTooLarge(ctx, convID, tl)
	}
	if err != nil {
		rn.log.WarnContext(ctx, "claim batch", slog.String("conversation_id", convID), slog.String("error", err.Error()))
		return false
	}
	if followUp == "" {
		return false
	}
	rn.claimed(ctx, c, rev, followUp)
	return true
}

// claimIn makes the claim's change in c, read for a CAS, if its batch is
// complete and unclaimed, and returns the follow-up run id; "" leaves c as
// it was. The CAS that writes c is what makes the claim exactly-once.
func (rn *runner) claimIn(c *Conversation, now time.Time) string {
	if !c.claimable() {
		return ""
	}
	followUp := c.Batch.PromptRunID
	if followUp == "" {
		followUp = runIDFor(rn.cfg.NewID(), c.ID)
	}
	ttl := rn.cfg.LeaseTTL
	if !rn.roster.take(c) {
		// Not this replica's to run: claimed with its lease expired, so
		// that a replica of its agent takes it over (claimed nudges them;
		// their reconcile would find it too).
		ttl = 0
	}
	if !c.Claim(rn.cfg.InstanceID, followUp, now, ttl) {
		return ""
	}
	return followUp
}

// claimed launches the follow-up a written claim (c at revision rev) chose;
// c is handed over to the run.
func (rn *runner) claimed(ctx context.Context, c *Conversation, rev uint64, followUp string) {
	if !c.leaseLive(rn.clock()) {
		rn.link.handOver(ctx, c)
		return
	}
	rn.stats.FollowUps.Add(1)
	rn.log.InfoContext(ctx, "batch complete; follow-up claimed", slog.String("conversation_id", c.ID),
		slog.String("paused_run_id", c.Batch.RunID), slog.String("run_id", followUp))
	rn.launchFrom(c.ID, followUp, c, rev, nil)
}
