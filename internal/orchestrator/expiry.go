package orchestrator

import (
	"context"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
)

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

// newTicker is time.NewTicker with a floor, so a tiny configured interval
// cannot spin.
func newTicker(d time.Duration) *time.Ticker {
	return time.NewTicker(max(d, 10*time.Millisecond))
}
