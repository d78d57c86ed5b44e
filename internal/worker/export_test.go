package worker

import (
	"context"
	"time"
)

// SetWebhookClock makes h read Retry-After dates and deadlines against now
// and wait between attempts with sleep.
func SetWebhookClock(h *Webhook, now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) {
	h.now, h.sleep = now, sleep
}
