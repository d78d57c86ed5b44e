package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
)

// Listing reads no state: the conversations are the subjects of the
// conversations' stream, and the last record of each says its status and
// times in its headers (hdrStatus, hdrCreated, the record's own time).

// listFilter selects a page of conversations.
type listFilter struct {
	// Status keeps only conversations in it; empty keeps all.
	Status Status
	// Limit is the page size.
	Limit int
	// Cursor is the id the previous page ended with; the page starts
	// after it.
	Cursor string
}

// ConversationSummary is a conversation as a list shows it.
type ConversationSummary struct {
	ID        string    `json:"conversation_id"`
	Status    Status    `json:"status"`
	Agent     string    `json:"agent,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// summaryChunk is how many conversations one request of last records
// covers.
const summaryChunk = 256

// conversationIDs lists every stored conversation, sorted.
func (s *store) conversationIDs(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	subjects, err := s.bus.LogSubjects(ctx, bus.StreamConversations, bus.ConversationSubjects)
	if err != nil {
		return nil, fmt.Errorf("list conversations: %w", err)
	}
	ids := make([]string, len(subjects))
	for i, subj := range subjects {
		ids[i] = strings.TrimPrefix(subj, convSubjectPrefix)
	}
	slices.Sort(ids)
	return ids, nil
}

var convSubjectPrefix = strings.TrimSuffix(bus.ConversationSubjects, ">")

// summaries reads the summaries of the conversations ids from their last
// records, in the order of ids (a conversation deleted meanwhile is left
// out).
func (s *store) summaries(ctx context.Context, ids []string) ([]ConversationSummary, error) {
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	subjects := make([]string, len(ids))
	for i, id := range ids {
		subjects[i] = bus.ConversationSubject(id)
	}
	if s.reads != nil {
		s.reads.Add(1)
	}
	last, err := s.bus.LastLogMsgs(ctx, bus.StreamConversations, subjects)
	if err != nil {
		return nil, fmt.Errorf("read conversations: %w", err)
	}
	out := make([]ConversationSummary, 0, len(last))
	for i, id := range ids {
		m, ok := last[subjects[i]]
		if !ok {
			continue
		}
		created, _ := time.Parse(time.RFC3339Nano, m.Header.Get(hdrCreated))
		out = append(out, ConversationSummary{
			ID: id, Status: Status(m.Header.Get(hdrStatus)), Agent: m.Header.Get(hdrAgent),
			CreatedAt: created, UpdatedAt: m.Time.UTC(),
		})
	}
	return out, nil
}

// scan calls keep for the conversations after cursor, in id order, until it
// returns false.
func (s *store) scan(ctx context.Context, cursor string, keep func(ConversationSummary) bool) error {
	ids, err := s.conversationIDs(ctx)
	if err != nil {
		return err
	}
	start, _ := slices.BinarySearch(ids, cursor)
	if start < len(ids) && ids[start] == cursor {
		start++
	}
	for i := start; i < len(ids); i += summaryChunk {
		sums, err := s.summaries(ctx, ids[i:min(i+summaryChunk, len(ids))])
		if err != nil {
			return err
		}
		for _, sum := range sums {
			if !keep(sum) {
				return nil
			}
		}
	}
	return nil
}

// list returns a page of conversations in id order, and the cursor of the
// next page ("" after the last).
func (s *store) list(ctx context.Context, f listFilter) (page []ConversationSummary, next string, err error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	more := false
	err = s.scan(ctx, f.Cursor, func(sum ConversationSummary) bool {
		if sum.Status == StatusDeleted || f.Status != "" && sum.Status != f.Status {
			return true
		}
		if len(page) == f.Limit {
			more = true
			return false
		}
		page = append(page, sum)
		return true
	})
	if err != nil {
		return nil, "", err
	}
	if more {
		next = page[len(page)-1].ID
	}
	return page, next, nil
}

// finishedBefore lists up to limit finished conversations whose last change
// is before t.
func (s *store) finishedBefore(ctx context.Context, t time.Time, limit int) ([]string, error) {
	var ids []string
	err := s.scan(ctx, "", func(sum ConversationSummary) bool {
		if sum.Status.Terminal() && sum.UpdatedAt.Before(t) {
			ids = append(ids, sum.ID)
		}
		return len(ids) < limit
	})
	return ids, err
}

// delete removes a finished conversation's history and state, and its due
// entry, and returns ErrNotFound when it has none; one under way is refused
// (*ConflictError). The tombstone is appended like any change — after the
// record the decision was made on, or not at all — so a change that another
// replica makes meanwhile is never purged with the rest: it either comes
// first, and the delete sees a conversation under way, or fails its own
// append and sees the tombstone. The purge then keeps only the tombstone,
// which tells replicas that still cache the conversation that it is gone;
// sweepTombstones removes it later. Deleting a deleted conversation
// answers ErrNotFound, after finishing a delete that stopped after its
// tombstone.
func (s *store) delete(ctx context.Context, id string) error {
	_, _, err := s.updateFrom(ctx, id, nil, 0, func(c *Conversation) error { return c.Delete(s.clock()) })
	if err != nil && !errors.Is(err, errDeleted) {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	if err := s.bus.PurgeLog(pctx, bus.StreamConversations, bus.ConversationSubject(id), 1); err != nil {
		return fmt.Errorf("delete conversation %s: %w", id, err)
	}
	if err := s.index.PurgeUpTo(pctx, dueKey(id), 0); err != nil {
		return fmt.Errorf("delete conversation %s: index: %w", id, err)
	}
	return err
}

// tombstoneLife is how long the tombstone of a deleted conversation stays:
// long enough for every replica to have read it or dropped the conversation
// from its cache.
const tombstoneLife = 24 * time.Hour

// sweepTombstones removes the tombstones older than tombstoneLife at now
// (and the conversations whose delete stopped before its purge) and returns
// how many.
func (s *store) sweepTombstones(ctx context.Context, now time.Time) (int, error) {
	var old []string
	if err := s.scan(ctx, "", func(sum ConversationSummary) bool {
		if sum.Status == StatusDeleted && sum.UpdatedAt.Before(now.Add(-tombstoneLife)) {
			old = append(old, sum.ID)
		}
		return true
	}); err != nil {
		return 0, err
	}
	for i, id := range old {
		// A log that is more than its tombstone is a delete that stopped
		// before its purge: finish that first. Nothing is appended after
		// a tombstone, so the last purge removes only it.
		if err := s.delete(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
			return i, err
		}
		pctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
		err := s.bus.PurgeLog(pctx, bus.StreamConversations, bus.ConversationSubject(id), 0)
		cancel()
		if err != nil {
			return i, fmt.Errorf("remove the tombstone of conversation %s: %w", id, err)
		}
		s.cache.drop(id)
	}
	return len(old), nil
}
