package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/telemetry"
)

// handleInline is the agent's handler when inline_wait is set: it stores and
// publishes the step's deferred calls at once, waits up to inline_wait for
// their replies to be stored in its log, and hands what arrived back to the run,
// which continues in the same run. What is still pending bubbles out: the
// run pauses as usual, and its calls, already published and marked, are not
// published again.
func (rn *runner) handleInline(rc *agent.RunContext, req *deferred.Requests, wait time.Duration) (*deferred.Results, error) {
	ctx := rc.Context()
	convID, runID := rc.ConversationID, rc.RunID
	runTrace := telemetry.InjectMap(ctx)
	grants := rn.liveGrants(ctx, rn.roster, req)
	_, seq, err := rn.fx.doFrom(ctx, convID, nil, 0, func(c *conversation.State, now time.Time) ([]conversation.Effect, error) {
		if !c.HoldsLease(rn.cfg.InstanceID, runID) {
			return nil, conversation.ErrLeaseLost
		}
		b, err := rn.pub.newBatch(rn.roster.agentOf(c), runID, req, c.Batch, runTrace)
		if err != nil {
			return nil, err
		}
		if err := c.BeginInline(rn.cfg.InstanceID, runID, b, now); err != nil {
			return nil, err
		}
		// A granted call's decision is taken with the other replies.
		return conversation.InlineEffects(runID, applyGrants(c, grants, now)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("inline: store batch: %w", err)
	}

	if err := rn.waitSettled(rc, convID, runID, seq, wait); err != nil && ctx.Err() != nil {
		return nil, err
	}

	// Take what arrived: mark it taken so that nothing offers it again, and
	// hand it to the run.
	var res *deferred.Results
	_, _, err = rn.fx.do(ctx, convID, func(c *conversation.State, now time.Time) ([]conversation.Effect, error) {
		if res = c.TakeInline(runID, req, now); res == nil {
			return nil, conversation.ErrUnchanged
		}
		return nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("inline: take replies: %w", err)
	}
	if res != nil {
		rn.log.DebugContext(ctx, "inline: replies taken", slog.String("conversation_id", convID), slog.String("run_id", runID),
			slog.Int("approvals", len(res.Approvals)), slog.Int("calls", len(res.Calls)))
	}
	return res, nil
}

// waitSettled follows the conversation's log, from the state at seq, until
// every call of the run's inline batch has a reply, or wait has passed.
func (rn *runner) waitSettled(rc *agent.RunContext, convID, runID string, seq uint64, wait time.Duration) error {
	ctx, cancel := context.WithCancel(rc.Context())
	defer cancel()
	appended, err := rn.store.watch(ctx, convID, seq)
	if err != nil {
		return fmt.Errorf("inline: %w", err)
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return nil
		case <-appended:
			c, _, err := rn.store.get(ctx, convID)
			if err != nil {
				continue
			}
			if c.Batch == nil || c.Batch.RunID != runID || c.Batch.Complete() {
				return nil
			}
		}
	}
}
