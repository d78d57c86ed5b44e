package orchestrator

import (
	"context"
	"time"
)

// Sweep runs one round of the retention sweep as if it were now.
func (o *Orchestrator) Sweep(ctx context.Context, now time.Time) (int, error) {
	return o.rec.sweep(ctx, now)
}

// Tombstone appends a conversation's tombstone and stops there, as a
// delete interrupted before its purge leaves it.
func (o *Orchestrator) Tombstone(ctx context.Context, id string) error {
	_, _, err := o.store.updateFrom(ctx, id, nil, 0, func(c *Conversation) error { return c.Delete(o.clock()) })
	return err
}
