package orchestrator

import (
	"context"
	"errors"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/wire"
)

// Stats is what o counted: the *Counts it was given as its observer
// (Config.Observer), as the tests' orchestrators are (testkit).
func (o *Orchestrator) Stats() *Counts {
	c, ok := o.cfg.Observer.(*Counts)
	if !ok {
		panic("orchestrator: a test reads the counts of an orchestrator not given a *Counts observer")
	}
	return c
}

// KeyedID lets tests name the ids an idempotency key gives.
var KeyedID = keyedID

// IndexNow puts the due entry of id now, as the index loop's next tick
// would, so that every replica's reconcile goes over it.
func (o *Orchestrator) IndexNow(ctx context.Context, id string) error {
	return o.store.indexNow(ctx, id)
}

// UnservedPending is the number of o's calls whose tool_unserved event
// may be still to come.
func UnservedPending(o *Orchestrator) int { return o.pub.unserved.pending() }

// StoredRuns is the number of runs o saw its calls stored for and has not
// marked yet.
func StoredRuns(o *Orchestrator) int { return o.pub.stored.len() }

// ListConversations reaches the store's listing.
func (o *Orchestrator) ListConversations(ctx context.Context, status conversation.Status, limit int, cursor string) ([]ConversationSummary, string, error) {
	return o.store.list(ctx, listFilter{Status: status, Limit: limit, Cursor: cursor})
}

// FinishedBefore lists the conversations finished before t that a sweep
// by age reads past the cursor named key (each key its own sweep).
func (o *Orchestrator) FinishedBefore(ctx context.Context, key string, t time.Time) ([]string, error) {
	var ids []string
	err := o.store.sweepAged(ctx, key, t, nil, func(sums []ConversationSummary) error {
		for _, s := range sums {
			if s.Status.Terminal() && s.UpdatedAt.Before(t) {
				ids = append(ids, s.ID)
			}
		}
		return nil
	})
	return ids, err
}

// StopReplies stops this replica's consumption of replies, so that another
// replica applies them: the shared durable's and, giving them up to the
// others, its reply partitions'.
func (o *Orchestrator) StopReplies(ctx context.Context) error {
	return errors.Join(o.pipe.replies.Stop(ctx), o.pipe.stopOwned(ctx))
}

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

// ScheduledDeadlines is the number of conversations o's expiry index
// holds.
func ScheduledDeadlines(o *Orchestrator) int { return o.deadlines.len() }

// WithDispatchUnpublished is cfg with the calls dispatched on their
// approval left unpublished, as a replica that stopped right after storing
// the decision leaves them.
func WithDispatchUnpublished(cfg Config) Config {
	cfg.dispatchUnpublished = true
	return cfg
}

// GrantSeen reports whether o's watch of the grants bucket holds the grant
// id (given on the bus, not through o).
func GrantSeen(o *Orchestrator, id string) bool {
	values, ok := o.grantCache.snapshot()
	return ok && (values[wire.GrantKeyBus+"."+id] != nil)
}

// StoreConversation stores c as a new conversation's first record, and
// carries out nothing of what the write would: a write whose answer was
// lost.
func (o *Orchestrator) StoreConversation(ctx context.Context, c *conversation.State) error {
	_, err := o.store.create(ctx, c)
	return err
}
