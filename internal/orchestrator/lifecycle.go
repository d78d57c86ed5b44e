package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
)

// Page sizes of a conversation list.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListRequest asks for a page of conversations, in id order.
type ListRequest struct {
	// Status keeps only conversations in it; empty keeps all.
	Status Status
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

var statuses = []Status{StatusRunning, StatusPaused, StatusResuming, StatusCompleted, StatusFailed, StatusCancelled}

// BadRequestError says what is wrong with a request's parameters.
type BadRequestError struct{ Msg string }

func (e *BadRequestError) Error() string { return e.Msg }

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
	if req.Cursor != "" && !ValidID(req.Cursor) {
		return ConversationList{}, &BadRequestError{fmt.Sprintf("cursor: %q is not a cursor this API gave", req.Cursor)}
	}
	page, next, err := o.store.list(ctx, listFilter{Status: req.Status, Limit: req.Limit, Cursor: req.Cursor})
	if err != nil {
		return ConversationList{}, err
	}
	if page == nil {
		page = []ConversationSummary{}
	}
	return ConversationList{Conversations: page, NextCursor: next}, nil
}

func validStatus(s Status) bool {
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
	gone := o.store.delete(ctx, id)
	if gone != nil && !errors.Is(gone, errDeleted) {
		return gone
	}
	// The events hold the history too. Those still queued go first, or
	// they would be published after the purge.
	o.events.queue.forget(id)
	if err := o.purgeEvents(ctx, id); err != nil {
		return err
	}
	if gone != nil {
		return gone
	}
	o.log.InfoContext(ctx, "conversation deleted", slog.String("conversation_id", id))
	return nil
}

// purgeEvents removes the events of conversation id.
func (o *Orchestrator) purgeEvents(ctx context.Context, id string) error {
	subj, err := bus.EventSubject(id)
	if err != nil {
		return err
	}
	stream, err := o.js.Stream(ctx, bus.StreamEvents)
	if err == nil {
		err = stream.Purge(ctx, jetstream.WithPurgeSubject(subj))
	}
	if err != nil {
		return fmt.Errorf("delete conversation %s: its events: %w", id, err)
	}
	return nil
}

// retentionBatch is how many conversations one round of the retention
// sweep deletes before it looks again.
const retentionBatch = 256

// maxRetentionNap bounds the wait between sweeps.
const maxRetentionNap = 10 * time.Minute

// retentionLoop deletes finished conversations older than Config.Retention,
// looking every tenth of it (at most every maxRetentionNap). Every replica
// sweeps; one that finds a conversation another deleted moves on.
func (o *Orchestrator) retentionLoop() {
	t := newTicker(min(o.cfg.Retention/10, maxRetentionNap))
	defer t.Stop()
	for {
		select {
		case <-o.stopping:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(o.runCtx, maxRetentionNap)
		if n, err := o.sweep(ctx, o.clock()); err != nil {
			o.log.WarnContext(ctx, "retention", slog.Int("deleted", n), slog.String("error", err.Error()))
		} else if n > 0 {
			o.log.InfoContext(ctx, "retention: finished conversations deleted", slog.Int("deleted", n), slog.Duration("retention", o.cfg.Retention))
		}
		cancel()
	}
}

// sweep deletes the conversations that finished before now - Retention
// and returns how many it deleted; it also removes the tombstones of
// conversations deleted more than tombstoneLife ago.
func (o *Orchestrator) sweep(ctx context.Context, now time.Time) (int, error) {
	if o.cfg.Retention <= 0 {
		return 0, nil
	}
	n := 0
	for {
		ids, err := o.store.finishedBefore(ctx, now.Add(-o.cfg.Retention), retentionBatch)
		if err != nil {
			return n, err
		}
		deleted := 0
		for _, id := range ids {
			if o.stopped.Load() {
				return n, nil
			}
			switch err := o.Delete(ctx, id); {
			case err == nil:
				n++
				deleted++
			case errors.Is(err, ErrNotFound):
			default:
				var ce *ConflictError
				if !errors.As(err, &ce) {
					return n, err
				}
			}
		}
		if len(ids) < retentionBatch || deleted == 0 {
			break
		}
	}
	gone, err := o.store.sweepTombstones(ctx, now)
	if gone > 0 {
		o.log.InfoContext(ctx, "retention: tombstones of deleted conversations removed", slog.Int("removed", gone))
	}
	return n, err
}
