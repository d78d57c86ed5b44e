package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
		if f.Status != "" && sum.Status != f.Status {
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

// delete removes a conversation's log and index entry (ErrNotFound when it
// has none). The caller checks that it is finished.
func (s *store) delete(ctx context.Context, id string) error {
	if err := bus.ValidateToken("conversation id", id); err != nil {
		return fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	}
	if _, _, err := s.refresh(ctx, id); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	if err := s.bus.PurgeLog(ctx, bus.StreamConversations, bus.ConversationSubject(id)); err != nil {
		return fmt.Errorf("delete conversation %s: %w", id, err)
	}
	s.cache.drop(id)
	if err := s.index.Delete(ctx, dueKey(id)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete conversation %s: index: %w", id, err)
	}
	return nil
}
