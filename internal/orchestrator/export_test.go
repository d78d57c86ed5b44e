package orchestrator

import (
	"context"
	"time"
)

// KeyedID lets tests name the ids an idempotency key gives.
var KeyedID = keyedID

// ListConversations, DeleteConversation and FinishedBefore reach the
// store's listing and deletion.
func (o *Orchestrator) ListConversations(ctx context.Context, status Status, limit int, cursor string) ([]ConversationSummary, string, error) {
	return o.store.list(ctx, listFilter{Status: status, Limit: limit, Cursor: cursor})
}

func (o *Orchestrator) DeleteConversation(ctx context.Context, id string) error {
	return o.store.delete(ctx, id)
}

func (o *Orchestrator) FinishedBefore(ctx context.Context, t time.Time, limit int) ([]string, error) {
	return o.store.finishedBefore(ctx, t, limit)
}

// StopReplies stops this replica's consumption of replies, so that another
// replica applies them.
func (o *Orchestrator) StopReplies(ctx context.Context) error { return o.pipe.replies.Stop(ctx) }

// FreshConversations is how many conversations this replica created and
// has not indexed or seen finish (fresh.go).
func (o *Orchestrator) FreshConversations() int { return o.store.fresh.len() }

// WithAppendTimeout is cfg with the store's timeout for one round of an
// append shortened to d, so that a test reaches an outcome left unknown
// without waiting the 10 s of storeOpTimeout.
func WithAppendTimeout(cfg Config, d time.Duration) Config {
	cfg.appendTimeout = d
	return cfg
}

// OnRestartIndexed has fn called when the due entry of a finished
// conversation has been put and the record that restarts it is yet to be
// appended.
func (o *Orchestrator) OnRestartIndexed(fn func(id string)) { o.store.restartIndexed = fn }
