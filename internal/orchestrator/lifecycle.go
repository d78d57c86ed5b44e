package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
)

// Page sizes of a conversation list.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListRequest asks for a page of conversations: in the order they were
// created, or in id order with a status of conversations under way
// (running, paused, resuming), which are listed from the due index.
type ListRequest struct {
	// Status keeps only conversations in it; empty keeps all.
	Status conversation.Status
	// Limit is the page size: DefaultListLimit when 0, at most
	// MaxListLimit.
	Limit int
	// Cursor is the NextCursor of the previous page; empty starts at the
	// first.
	Cursor string
}

// ConversationList is a page of conversations.
type ConversationList struct {
	Conversations []ConversationSummary `json:"conversations"`
	// NextCursor asks for the next page; empty after the last.
	NextCursor string `json:"next_cursor,omitempty"`
}

var statuses = []conversation.Status{conversation.StatusRunning, conversation.StatusPaused, conversation.StatusResuming, conversation.StatusCompleted, conversation.StatusFailed, conversation.StatusCancelled}

// Conversations lists the stored conversations a page at a time.
func (o *Orchestrator) Conversations(ctx context.Context, req ListRequest) (ConversationList, error) {
	if req.Status != "" && !validStatus(req.Status) {
		return ConversationList{}, &BadRequestError{fmt.Sprintf("status: %q is not a status (want one of %v)", req.Status, statuses)}
	}
	if req.Limit < 0 || req.Limit > MaxListLimit {
		return ConversationList{}, &BadRequestError{fmt.Sprintf("limit: %d is not between 1 and %d", req.Limit, MaxListLimit)}
	}
	if req.Limit == 0 {
		req.Limit = DefaultListLimit
	}
	f := listFilter{Status: req.Status, Limit: req.Limit, Cursor: req.Cursor}
	if err := f.checkCursor(); err != nil {
		return ConversationList{}, err
	}
	page, next, err := o.store.list(ctx, f)
	if err != nil {
		return ConversationList{}, err
	}
	if page == nil {
		page = []ConversationSummary{}
	}
	return ConversationList{Conversations: page, NextCursor: next}, nil
}

func validStatus(s conversation.Status) bool {
	for _, v := range statuses {
		if s == v {
			return true
		}
	}
	return false
}

// Delete removes a finished conversation: its state and history, and its
// events; its audit records stay (TOOLGATE_AUDIT). One under way is
// refused (*ConflictError): cancel it first.
//
// It is safe against a change made meanwhile by another replica (see
// store.delete); deleting a deleted conversation answers ErrNotFound, after
// finishing what a delete that stopped half-way left.
func (o *Orchestrator) Delete(ctx context.Context, id string) error {
	return o.remove(answersRequest(ctx), id)
}

// remove is Delete, for the retention sweep too: the effector's
// (effector.delete).
func (co *core) remove(ctx context.Context, id string) error {
	return co.fx.delete(ctx, id)
}

// Sweep runs one retention sweep as if it were now, as the retention loop
// does every tenth of the shortest retention of its agents (at most ten
// minutes apart): it deletes the conversations that finished before now
// less the retention of their agent's config (AgentConfig.Retention, none
// when it is 0) and removes the tombstones of those deleted more
// than a day before now, and returns how many conversations it deleted.
// It reads what aged since the last sweep of any replica, not every stored
// conversation.
func (o *Orchestrator) Sweep(ctx context.Context, now time.Time) (int, error) {
	return o.rec.sweep(ctx, now)
}

// maxRetentionNap bounds the wait between sweeps.
const maxRetentionNap = 10 * time.Minute

// retentionLoop deletes finished conversations older than their agent's
// retention, looking every tenth of the shortest (at most every maxRetentionNap), and the
// tombstones of deleted conversations older than a day (with no
// retention too: a DELETE leaves one). Every replica sweeps; the sweeps go
// on from where the last one ended, whichever replica it was, and one that
// finds a conversation another deleted moves on.
func (rc *reconciler) retentionLoop() {
	every := maxRetentionNap
	for _, r := range rc.roster.retentions() {
		every = min(every, r/10)
	}
	t := newTicker(every)
	defer t.Stop()
	for {
		select {
		case <-rc.stopping:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(rc.loopCtx, maxRetentionNap)
		if n, err := rc.sweep(ctx, rc.clock()); err != nil && rc.loopCtx.Err() == nil {
			// Where it stopped, the next sweep goes on.
			rc.log.WarnContext(ctx, "retention", slog.Int("deleted", n), slog.String("error", err.Error()))
		} else if n > 0 {
			rc.log.InfoContext(ctx, "retention: finished conversations deleted", slog.Int("deleted", n))
		}
		cancel()
	}
}

// sweep deletes the conversations that finished before now less the
// retention of their agent, as the config they record says (policy.go): a
// sweep per retention this replica's agents have, each with a cursor of
// its own, deletes those of its agents whose config this replica holds (a
// replica's own setting never deletes a conversation of an agent kept
// longer, or one it does not know). It returns how many it deleted; it
// also removes the tombstones of conversations deleted more than
// tombstoneLife ago. What it reads is the stretch of the conversations'
// stream that aged past those times since the last sweep (store.sweepAged),
// not every stored conversation.
func (rc *reconciler) sweep(ctx context.Context, now time.Time) (int, error) {
	var n atomic.Int64
	for _, r := range rc.roster.retentions() {
		if err := rc.sweepRetention(ctx, now, r, &n); err != nil {
			if errors.Is(err, ErrStopped) {
				return int(n.Load()), nil
			}
			return int(n.Load()), err
		}
	}
	gone, err := rc.store.sweepTombstones(ctx, now)
	if gone > 0 {
		rc.log.InfoContext(ctx, "retention: tombstones of deleted conversations removed", slog.Int("removed", gone))
	}
	return int(n.Load()), err
}

// finishedCursor names the cursor of the sweep of retention r: one per
// retention, as each reads the stream up to its own cutoff.
func finishedCursor(r time.Duration) string {
	return cursorFinished + "." + strconv.FormatInt(r.Milliseconds(), 10)
}

// sweepRetention deletes the conversations finished before now - r of the
// agents this replica holds with retention r, counting them in n.
func (rc *reconciler) sweepRetention(ctx context.Context, now time.Time, r time.Duration, n *atomic.Int64) error {
	cutoff := now.Add(-r)
	// Every record carries the status the conversation is left in, so a
	// finished conversation's last record says finished: the records of
	// conversations under way, and tombstones, are not read for.
	ends := func(m bus.HeaderMsg) bool { return conversation.Status(m.Header.Get(hdrStatus)).Terminal() }
	return rc.store.sweepAged(ctx, finishedCursor(r), cutoff, ends, func(sums []ConversationSummary) error {
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(deleteInFlight)
		for _, sum := range sums {
			if !sum.Status.Terminal() || !sum.UpdatedAt.Before(cutoff) {
				// Under way, or changed since: its later record comes past
				// the cutoff in its turn.
				continue
			}
			if a := rc.roster.keeper(sum.Agent, sum.digest); a == nil || a.policy.retention != r {
				// Another agent's, or kept for another time: its
				// replicas' sweeps delete it.
				continue
			}
			if rc.stopped.Load() {
				g.Go(func() error { return ErrStopped })
				break
			}
			g.Go(func() error {
				var (
					ce      *conversation.ConflictError
					corrupt *CorruptError
				)
				switch err := rc.remove(gctx, sum.ID); {
				case err == nil:
					n.Add(1)
				case errors.Is(err, ErrNotFound), errors.As(err, &ce):
				case errors.As(err, &corrupt):
					// Left to an operator, and past: stopping here would
					// stop every later deletion with it.
					rc.observer.reconcileError()
					rc.log.ErrorContext(ctx, "retention: conversation left as it is: its log cannot be read (DELETE ?corrupt=true removes it)",
						slog.String("conversation_id", sum.ID), slog.String("error", err.Error()))
				default:
					return err
				}
				return nil
			})
		}
		return g.Wait()
	})
}

// keeper is the agent of this replica whose config says how long a
// conversation of agent, recorded with digest, is kept: the one with that
// digest (or any, for a conversation recorded without), or, once no live
// replica advertises the digest, the one that adopts it (the upgrade
// rule); nil when it is another's to say.
func (r *roster) keeper(agent, digest string) *agentRuntime {
	a := r.agentOf(&conversation.State{Agent: agent})
	if a == nil || digest == "" || digest == a.digest {
		return a
	}
	if r.replicas.serves(agent, digest, r.clock()) {
		return nil
	}
	return a
}

// retentions lists the retentions of this replica's agents that delete
// (positive), each once.
func (r *roster) retentions() []time.Duration {
	var out []time.Duration
	for _, name := range r.names {
		if d := r.agents[name].policy.retention; d > 0 && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// deleteInFlight bounds the deletions of a retention sweep in flight at
// once: one after another, each a few round trips (the tombstone, the
// purges of the log, the due entry and the events), a sweep deleted about
// 1,500 conversations a second, fewer than a busy system finishes.
const deleteInFlight = 32
