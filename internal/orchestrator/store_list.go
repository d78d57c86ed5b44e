package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
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

// openIDs lists the conversations that may be under way, sorted: the due
// index's and this replica's fresh ones (store.due). Another replica's
// fresh conversations are not among them until it indexes them, 10–20 s
// after their start if they last.
func (s *store) openIDs(ctx context.Context) ([]string, error) {
	due, err := s.due(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(due))
	for i, e := range due {
		ids[i] = e.id
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// scan calls keep for the conversations of ids (conversationIDs or
// openIDs) after cursor, in id order, until it returns false.
func (s *store) scan(ctx context.Context, list func(context.Context) ([]string, error), cursor string, keep func(ConversationSummary) bool) error {
	ids, err := list(ctx)
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
// next page ("" after the last). A page of conversations under way (a
// status filter of running, paused or resuming) goes over the due index
// instead of every stored conversation: listing the conversations that
// wait for something is what a client polls, and its cost must not grow
// with the finished ones (155–230 ms a page with 100,000 stored, for the
// list of subjects alone).
func (s *store) list(ctx context.Context, f listFilter) (page []ConversationSummary, next string, err error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	ids := s.conversationIDs
	if f.Status != "" && !f.Status.ended() {
		ids = s.openIDs
	}
	more := false
	err = s.scan(ctx, ids, f.Cursor, func(sum ConversationSummary) bool {
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

// Sweeps by age. The conversations stream holds records in the order they
// were stored, so a conversation whose last change is older than a cutoff
// has a record in the stretch of the stream stored before it. A sweep reads
// the headers of that stretch from where the last sweep ended, its cursor
// kept in the index for every replica and every start: each record is read
// once, as it ages past the cutoff, and a sweep costs what was stored in
// the time it covers instead of a look at every stored conversation (which
// each sweep made, every tenth of the retention and at most ten minutes
// apart, on every replica: a summary of each conversation ever kept, and
// for a backlog a scan from the first one again after each batch deleted).
const (
	cursorFinished   = "sweep.finished"
	cursorTombstones = "sweep.tombstones"
)

// sweepBatch is how many conversations a sweep reads the last records of
// and acts on before its cursor moves past them, and sweepScan how many
// records' headers at most: a long stretch with few of the records looked
// for (the first sweep of a store that had none, a day of records for one
// tombstone) is gone through in steps the cursor keeps, not in one that
// the sweep's time might end before it is done, to begin again the next
// time.
const (
	sweepBatch = summaryChunk
	sweepScan  = 1 << 16
)

func (s *store) sweepScanLimit() int {
	if s.sweepScan > 0 {
		return s.sweepScan
	}
	return sweepScan
}

// sweepAged calls act with the summaries of the conversations that have a
// record matching match (every record when nil) stored before cutoff, past
// the cursor named key, sweepBatch conversations at a time, and moves the
// cursor past each batch act returned nil for. A summary may be of a
// conversation changed since cutoff: act decides. What act fails on is read
// again by the next sweep.
func (s *store) sweepAged(ctx context.Context, key string, cutoff time.Time, match func(bus.HeaderMsg) bool, act func([]ConversationSummary) error) error {
	from, err := s.sweepCursor(ctx, key)
	if err != nil {
		return err
	}
	for {
		var (
			ids     []string
			seen    = map[string]bool{}
			upTo    = from
			more    bool
			scanned int
		)
		err := s.bus.ScanHeaders(ctx, bus.StreamConversations, bus.ConversationSubjects, from+1, func(m bus.HeaderMsg) bool {
			if !m.Time.Before(cutoff) {
				return false
			}
			if scanned == s.sweepScanLimit() {
				more = true
				return false
			}
			scanned++
			if match == nil || match(m) {
				id := strings.TrimPrefix(m.Subject, convSubjectPrefix)
				if !seen[id] {
					if len(ids) == sweepBatch {
						more = true
						return false
					}
					seen[id] = true
					ids = append(ids, id)
				}
			}
			upTo = m.Seq
			return true
		})
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		if len(ids) > 0 {
			sums, err := s.summaries(ctx, ids)
			if err != nil {
				return fmt.Errorf("sweep: %w", err)
			}
			if err := act(sums); err != nil {
				return err
			}
		}
		if upTo > from {
			if err := s.moveSweepCursor(ctx, key, upTo); err != nil {
				return err
			}
			from = upTo
		}
		if !more {
			return nil
		}
	}
}

// sweepCursor is the sequence a sweep by age goes on after: 0 before the
// first, or when the stream is behind it (made again since).
func (s *store) sweepCursor(ctx context.Context, key string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	e, err := s.index.Get(ctx, key)
	if errors.Is(err, bus.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sweep: cursor %s: %w", key, err)
	}
	seq, err := strconv.ParseUint(string(e.Value), 10, 64)
	if err != nil {
		// Written by nothing but moveSweepCursor: sweep from the start
		// rather than never.
		if s.log != nil {
			s.log.WarnContext(ctx, "sweep: cursor unreadable, sweeping from the start", slog.String("key", key), slog.String("error", err.Error()))
		}
		return 0, nil
	}
	last, err := s.bus.LastSequence(ctx, bus.StreamConversations)
	if err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	if seq > last {
		return 0, nil
	}
	return seq, nil
}

// moveSweepCursor sets the cursor named key to seq unless another sweep
// took it further.
func (s *store) moveSweepCursor(ctx context.Context, key string, seq uint64) error {
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	_, err := s.index.Mutate(ctx, key, func(v []byte, _ uint64) ([]byte, error) {
		if cur, err := strconv.ParseUint(string(v), 10, 64); err == nil && cur >= seq {
			return nil, errUnchanged
		}
		return strconv.AppendUint(nil, seq, 10), nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		return fmt.Errorf("sweep: move cursor %s: %w", key, err)
	}
	return nil
}

// sweepTombstones removes the tombstones older than tombstoneLife at now
// (and the conversations whose delete stopped before its purge) and returns
// how many.
func (s *store) sweepTombstones(ctx context.Context, now time.Time) (int, error) {
	cutoff := now.Add(-tombstoneLife)
	n := 0
	isTombstone := func(m bus.HeaderMsg) bool { return m.Header.Get(hdrStatus) == string(StatusDeleted) }
	err := s.sweepAged(ctx, cursorTombstones, cutoff, isTombstone, func(sums []ConversationSummary) error {
		for _, sum := range sums {
			if sum.Status != StatusDeleted || !sum.UpdatedAt.Before(cutoff) {
				continue
			}
			// A log that is more than its tombstone is a delete that
			// stopped before its purge: finish that first. Nothing is
			// appended after a tombstone, so the last purge removes only
			// it.
			var corrupt *CorruptError
			if err := s.delete(ctx, sum.ID); err != nil && !errors.Is(err, ErrNotFound) && !errors.As(err, &corrupt) {
				return err
			}
			// A log that cannot be read (a damaged record that DELETE
			// ?corrupt=true could not purge either) goes all the same.
			pctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
			err := s.bus.PurgeLog(pctx, bus.StreamConversations, bus.ConversationSubject(sum.ID), 0)
			cancel()
			if err != nil && corrupt != nil {
				if s.log != nil {
					s.log.WarnContext(ctx, "sweep: the tombstone of a conversation whose log cannot be read stays", slog.String("conversation_id", sum.ID), slog.String("error", err.Error()))
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("remove the tombstone of conversation %s: %w", sum.ID, err)
			}
			s.cache.drop(sum.ID)
			n++
		}
		return nil
	})
	return n, err
}
