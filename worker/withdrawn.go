package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
)

// withdrawLookupTimeout bounds the look-up of a call before it runs.
const withdrawLookupTimeout = 5 * time.Second

// withdrawals is the check, before a call runs, that the orchestrator has
// not withdrawn it: a cancelled, expired or deleted conversation's calls are
// deleted from the calls stream (bus.WithdrawCalls), and one this worker was
// delivered before that is looked up by its stream sequence
// (bus.CallQueued). The cancel notice (cancel.go) reaches only the workers
// running at the cancel; the look-up covers a call delivered before the
// withdrawal whose notice was missed. A look-up that fails runs the call, as
// before: losing a wanted call is worse than running an unwanted one, whose
// reply is refused as late. A user not allowed the look-up (NATS users
// written before it was in the worker's role) turns it off, said once.
type withdrawals struct {
	denied atomic.Bool
}

// withdrawn reports whether c's call was taken out of the queue after it
// was delivered.
func (ws *withdrawals) withdrawn(ctx context.Context, c *callRun) bool {
	if ws.denied.Load() {
		return false
	}
	lctx, cancel := context.WithTimeout(ctx, withdrawLookupTimeout)
	defer cancel()
	queued, err := c.w.bus.CallQueued(lctx, c.d.StreamSeq)
	switch {
	case err == nil:
		return !queued
	case errors.Is(err, bus.ErrPermissionDenied):
		if !ws.denied.Swap(true) {
			c.log.WarnContext(ctx, "calls are not looked up before they run (this user may not: add $JS.API.STREAM.MSG.GET.TOOLGATE_CALLS to its permissions); a withdrawn call that was delivered already runs", slog.Any("error", err))
		}
	default:
		c.log.WarnContext(ctx, "cannot look the call up before running it; running it", slog.Any("error", err))
	}
	return false
}

// stopWithdrawn ends a withdrawn call without running it and without a
// reply; its message is gone already, so the ack only tells the consumer.
func (c *callRun) stopWithdrawn(ctx context.Context) {
	c.outcome = OutcomeWithdrawn
	c.log.InfoContext(ctx, "call withdrawn by the orchestrator (its conversation was cancelled or deleted, or it expired); not run")
	if err := c.d.Ack(); err != nil {
		c.log.DebugContext(ctx, "ack a withdrawn call", slog.Any("error", err))
	}
}
