package orchestrator

import (
	"context"

	"github.com/toolgate/toolgate/internal/conversation"
)

// Tombstone appends a conversation's tombstone and stops there, as a
// delete interrupted before its purge leaves it.
func (o *Orchestrator) Tombstone(ctx context.Context, id string) error {
	_, _, err := o.store.updateFrom(ctx, id, nil, 0, func(c *conversation.State) error { return c.Delete(o.clock()) })
	return err
}
