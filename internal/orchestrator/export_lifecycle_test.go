package orchestrator

import (
	"context"
	"time"
)

// Sweep runs one round of the retention sweep as if it were now.
func (o *Orchestrator) Sweep(ctx context.Context, now time.Time) (int, error) {
	return o.sweep(ctx, now)
}
