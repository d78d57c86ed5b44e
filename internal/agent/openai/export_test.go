package openai

import (
	"context"
	"time"
)

// SetClock makes m read Retry-After dates against now and wait between
// attempts with sleep.
func SetClock(m *Model, now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) {
	m.now, m.sleep = now, sleep
}
