package webhook

import (
	"context"
	"time"
)

// SetClock makes h read Retry-After dates and deadlines against now
// and wait between attempts with sleep.
func SetClock(h *Webhook, now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) {
	h.now, h.sleep = now, sleep
}
