package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
)

// Listing reads no state: the conversations are the subjects of the
// conversations' stream, and the last record of each says its status and
// times in its headers (hdrStatus, hdrCreated, the record's own time).

// listFilter selects a page of conversations.
type listFilter struct {
	// Status keeps only conversations in it; empty keeps all.
	Status conversation.Status
	// Limit is the page size.
	Limit int
	// Cursor is where the previous page ended (checkCursor): the page
	// starts after it.
	Cursor string
}

// ConversationSummary is a conversation as a list shows it.
type ConversationSummary struct {
	ID        string              `json:"conversation_id"`
	Status    conversation.Status `json:"status"`
	Agent     string              `json:"agent,omitempty"`
	CreatedAt time.Time           `json:"created_at"`
	UpdatedAt time.Time           `json:"updated_at"`
	// digest is the AgentDigest its last record names.
	digest string
}

// summaryChunk is how many conversations one request of last records
// covers.
const summaryChunk = 256

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
	if s.observer != nil {
		s.observer.stateRead()
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
			ID: id, Status: conversation.Status(m.Header.Get(hdrStatus)), Agent: m.Header.Get(hdrAgent),
			CreatedAt: created, UpdatedAt: m.Time.UTC(), digest: m.Header.Get(hdrDigest),
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

// list returns a page of conversations, and the cursor of the next page
// ("" after the last). A page of conversations under way (a status filter
// of running, paused or resuming) goes over the due index, in id order:
// listing the conversations that wait for something is what a client
// polls, and its cost must not grow with the finished ones. Any other page
// goes over the conversations in the order they were created (listCreated).
func (s *store) list(ctx context.Context, f listFilter) (page []ConversationSummary, next string, err error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.byCreation() {
		return s.listCreated(ctx, f)
	}
	ids, err := s.openIDs(ctx)
	if err != nil {
		return nil, "", err
	}
	start, _ := slices.BinarySearch(ids, f.Cursor)
	if start < len(ids) && ids[start] == f.Cursor {
		start++
	}
	for i := start; i < len(ids); i += summaryChunk {
		sums, err := s.summaries(ctx, ids[i:min(i+summaryChunk, len(ids))])
		if err != nil {
			return nil, "", err
		}
		for _, sum := range sums {
			if !f.keeps(sum) {
				continue
			}
			if len(page) == f.Limit {
				return page, page[len(page)-1].ID, nil
			}
			page = append(page, sum)
		}
	}
	return page, "", nil
}

// byCreation reports whether a page of f goes over every conversation in
// the order they were created (listCreated), its cursor a sequence,
// rather than over the due index in id order, its cursor an id.
func (f listFilter) byCreation() bool { return f.Status == "" || f.Status.Ended() }

// checkCursor says what is wrong with f's cursor, if anything.
func (f listFilter) checkCursor() error {
	if f.Cursor == "" {
		return nil
	}
	if f.byCreation() {
		_, err := parseListCursor(f.Cursor)
		return err
	}
	if !ValidID(f.Cursor) {
		return &BadRequestError{fmt.Sprintf("cursor: %q is not a cursor a list of that status gave", f.Cursor)}
	}
	return nil
}

// keeps reports whether sum belongs on a page of f.
func (f listFilter) keeps(sum ConversationSummary) bool {
	return sum.Status != conversation.StatusDeleted && (f.Status == "" || sum.Status == f.Status)
}

// listCreated is list over every stored conversation, in the order they
// were created: it reads the headers of the conversations stream from the
// cursor (the sequence of the first record of the conversation the last
// page ended with) and takes the conversations whose first record it
// meets (bus.HeaderMsg.StartsLog). A page costs the records stored between
// its first and its last conversation's start, however many are stored;
// listing every subject cost 155–230 ms a page at 100,000 stored, the
// list of subjects alone, and grew with every conversation ever kept. A
// request goes through at most sweepScan records: a filter that few
// conversations pass gives a shorter page, even an empty one, with a
// cursor to go on from.
func (s *store) listCreated(ctx context.Context, f listFilter) ([]ConversationSummary, string, error) {
	from, err := parseListCursor(f.Cursor)
	if err != nil {
		return nil, "", err
	}
	var (
		page   []ConversationSummary
		last   uint64 // the first record of the page's last conversation
		budget = s.sweepScanLimit()
	)
	starts := bus.HeaderMsg.StartsLog
	for {
		st, err := s.scanStep(ctx, from, budget, min(summaryChunk, f.Limit+1-len(page)), nil, starts)
		if err != nil {
			return nil, "", fmt.Errorf("list conversations: %w", err)
		}
		var sums []ConversationSummary
		if len(st.ids) > 0 {
			if sums, err = s.summaries(ctx, st.ids); err != nil {
				return nil, "", err
			}
		}
		byID := make(map[string]ConversationSummary, len(sums))
		for _, sum := range sums {
			byID[sum.ID] = sum
		}
		for i, id := range st.ids {
			sum, ok := byID[id]
			if !ok || !f.keeps(sum) {
				continue
			}
			if len(page) == f.Limit {
				return page, listCursor(last), nil
			}
			page = append(page, sum)
			last = st.seqs[i]
		}
		budget -= st.records
		switch {
		case !st.more:
			return page, "", nil
		case budget <= 0 && len(page) == f.Limit:
			return page, listCursor(last), nil
		case budget <= 0:
			return page, listCursor(st.upTo), nil
		}
		from = st.upTo
	}
}

// listCursor is the cursor of a page of listCreated that goes on after
// sequence seq of the conversations stream.
func listCursor(seq uint64) string { return strconv.FormatUint(seq, 10) }

// parseListCursor is the sequence a listCreated cursor goes on after (0:
// from the start).
func parseListCursor(cursor string) (uint64, error) {
	if cursor == "" {
		return 0, nil
	}
	seq, err := strconv.ParseUint(cursor, 10, 64)
	if err != nil {
		return 0, &BadRequestError{fmt.Sprintf("cursor: %q is not a cursor a list of that status gave", cursor)}
	}
	return seq, nil
}

// delete appends the tombstone fn makes of a finished conversation
// (conversation.DeleteTransition) and returns it; fn refuses one under way
// (*ConflictError), and a conversation deleted already answers errDeleted.
// The tombstone is appended like any change — after the record the
// decision was made on, or not at all — so a change that another replica
// makes meanwhile is never purged with the rest: it either comes first,
// and the delete sees a conversation under way, or fails its own append
// and sees the tombstone. What the tombstone asks for (the purge, which
// keeps only the tombstone, telling replicas that still cache the
// conversation that it is gone, until sweepTombstones removes it) is the
// effector's to carry out, for the delete whose tombstone this is.
//
// At the storage limit the tombstone cannot be appended, and a DELETE, the
// API's way to free room, answered 503 like a start. A finished
// conversation's log is then purged first, which frees its room, and the
// tombstone written to the emptied log (dropLog).
func (s *store) delete(ctx context.Context, id string, fn func(*conversation.State) error) (*conversation.State, error) {
	// tomb is the tombstone of the last attempt, nil when fn refused it.
	var tomb *conversation.State
	c, _, err := s.updateFrom(ctx, id, nil, 0, func(c *conversation.State) error {
		tomb = nil
		if err := fn(c); err != nil {
			return err
		}
		tomb = c
		return nil
	})
	if tomb != nil && bus.StorageFull(err) {
		if derr := s.dropLog(ctx, id); derr != nil {
			return nil, errors.Join(err, derr)
		}
		return tomb, nil
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// dropLog replaces the log of id with a tombstone and removes its due
// entry: for a log that cannot be read (DeleteCorrupt), and for one whose
// tombstone cannot be appended for want of room (store.delete), since the
// purge frees the room the tombstone needs. The tombstone is the log's
// first record again (purge, then append expecting an empty log), so a
// replica that still caches the conversation finds it deleted when its
// next append is refused; if another write came between purge and append,
// the purge is repeated.
func (s *store) dropLog(ctx context.Context, id string) error {
	subj := bus.ConversationSubject(id)
	now := s.clock()
	tomb := &conversation.State{ID: id, Status: conversation.StatusDeleted, CreatedAt: now, UpdatedAt: now}
	for range maxCASAttempts {
		pctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
		err := s.bus.PurgeLog(pctx, bus.StreamConversations, subj, 0)
		cancel()
		if err != nil {
			return fmt.Errorf("delete conversation %s: %w", id, err)
		}
		seq, n, err := s.append(ctx, tomb, 0, conversation.FullRecord(tomb))
		if conflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("delete conversation %s: tombstone: %w", id, err)
		}
		s.cache.put(id, tomb.Clone(), seq, int64(n))
		dctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
		defer cancel()
		if err := s.index.PurgeUpTo(dctx, dueKey(id), 0); err != nil {
			return fmt.Errorf("delete conversation %s: index: %w", id, err)
		}
		return nil
	}
	return fmt.Errorf("delete conversation %s: written to %d times while being deleted", id, maxCASAttempts)
}

// purge removes the records of conversation id but its last keep (0: all
// of them), and its due entry.
func (s *store) purge(ctx context.Context, id string, keep uint64) error {
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	if err := s.bus.PurgeLog(ctx, bus.StreamConversations, bus.ConversationSubject(id), keep); err != nil {
		return fmt.Errorf("delete conversation %s: %w", id, err)
	}
	if err := s.index.PurgeUpTo(ctx, dueKey(id), 0); err != nil {
		return fmt.Errorf("delete conversation %s: index: %w", id, err)
	}
	return nil
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
	if s.scanLimit > 0 {
		return s.scanLimit
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
	aged := func(m bus.HeaderMsg) bool { return m.Time.Before(cutoff) }
	for {
		st, err := s.scanStep(ctx, from, s.sweepScanLimit(), sweepBatch, aged, match)
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		if len(st.ids) > 0 {
			sums, err := s.summaries(ctx, st.ids)
			if err != nil {
				return fmt.Errorf("sweep: %w", err)
			}
			if err := act(sums); err != nil {
				return err
			}
		}
		if st.upTo > from {
			if err := s.moveSweepCursor(ctx, key, st.upTo); err != nil {
				return err
			}
			from = st.upTo
		}
		if !st.more {
			return nil
		}
	}
}

// scanned is what one step of a scan of the conversations stream found.
type scanned struct {
	// ids are the conversations found, each once, in the order of the
	// records that matched, and seqs those records' sequences.
	ids  []string
	seqs []uint64
	// upTo is the last sequence gone past: the next step begins after it.
	upTo uint64
	// records is how many records the step went through.
	records int
	// more says the step stopped at one of its bounds, not at the end of
	// the stretch.
	more bool
}

// scanStep goes through the headers of the conversations stream after
// from, while within (nil: to the stream's end) holds, at most limit
// records, and collects the conversations of the records match keeps
// (every record when nil), at most n of them.
func (s *store) scanStep(ctx context.Context, from uint64, limit, n int, within, match func(bus.HeaderMsg) bool) (scanned, error) {
	st := scanned{upTo: from}
	seen := map[string]bool{}
	err := s.bus.ScanHeaders(ctx, bus.StreamConversations, bus.ConversationSubjects, from+1, func(m bus.HeaderMsg) bool {
		if within != nil && !within(m) {
			return false
		}
		if st.records == limit {
			st.more = true
			return false
		}
		if match == nil || match(m) {
			id := strings.TrimPrefix(m.Subject, convSubjectPrefix)
			if !seen[id] {
				if len(st.ids) == n {
					st.more = true
					return false
				}
				seen[id] = true
				st.ids = append(st.ids, id)
				st.seqs = append(st.seqs, m.Seq)
			}
		}
		st.records++
		st.upTo = m.Seq
		return true
	})
	return st, err
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
			return nil, conversation.ErrUnchanged
		}
		return strconv.AppendUint(nil, seq, 10), nil
	})
	if err != nil && !errors.Is(err, conversation.ErrUnchanged) {
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
	isTombstone := func(m bus.HeaderMsg) bool { return m.Header.Get(hdrStatus) == string(conversation.StatusDeleted) }
	err := s.sweepAged(ctx, cursorTombstones, cutoff, isTombstone, func(sums []ConversationSummary) error {
		for _, sum := range sums {
			if sum.Status != conversation.StatusDeleted || !sum.UpdatedAt.Before(cutoff) {
				continue
			}
			// Nothing is appended after a tombstone, so one purge of
			// the whole log removes it, with what a delete that stopped
			// before its purge left before it (a damaged record too) and
			// that delete's due entry, without reading the log. Each
			// tombstone was a read of the log, two purges of it and one
			// of the due entry.
			if err := s.purge(ctx, sum.ID, 0); err != nil {
				return fmt.Errorf("remove the tombstone of conversation %s: %w", sum.ID, err)
			}
			s.cache.drop(sum.ID)
			n++
		}
		return nil
	})
	return n, err
}

// indexFresh puts in the due index the conversations of the fresh set
// added before t (all with a zero t) that have not finished, and takes
// them, and those that have, out of the set. A conversation whose log is
// missing is taken out once its first record was stored (it was deleted)
// or could no longer be (the write timed out).
func (s *store) indexFresh(ctx context.Context, t time.Time) error {
	old := s.fresh.addedBefore(t)
	if len(old) == 0 {
		return nil
	}
	// The cached state says it without a read: a finished conversation
	// stays finished (a new prompt indexes it itself), and one cached as
	// open that another replica finished meanwhile costs an entry that
	// reconcile removes.
	var ids, open []string
	for id := range old {
		c, _, ok := s.cache.get(id)
		switch {
		case !ok:
			ids = append(ids, id)
		case c.Status.Terminal() || c.Status == conversation.StatusDeleted:
			s.fresh.remove(id)
		default:
			open = append(open, id)
		}
	}
	now := s.clock()
	for i := 0; i < len(ids); i += summaryChunk {
		chunk := ids[i:min(i+summaryChunk, len(ids))]
		sums, err := s.summaries(ctx, chunk)
		if err != nil {
			return err
		}
		found := make(map[string]conversation.Status, len(sums))
		for _, sum := range sums {
			found[sum.ID] = sum.Status
		}
		for _, id := range chunk {
			st, ok := found[id]
			switch {
			case !ok:
				if e := old[id]; e.seq > 0 || now.Sub(e.since) > 2*storeOpTimeout {
					s.fresh.remove(id)
				}
			case st.Terminal() || st == conversation.StatusDeleted:
				s.fresh.remove(id)
			default:
				open = append(open, id)
			}
		}
	}
	return s.markAllDue(ctx, open, s.fresh.has, func(id string, _ uint64) { s.fresh.remove(id) })
}

// markAllDue puts the due entries of ids, undueInFlight at once, calling
// done with each put and its revision; it returns the first error. An id
// for which still (when not nil) says false as its turn comes is skipped:
// a conversation that finished meanwhile.
func (s *store) markAllDue(ctx context.Context, ids []string, still func(string) bool, done func(id string, rev uint64)) error {
	var (
		wg    sync.WaitGroup
		sem   = make(chan struct{}, undueInFlight)
		errMu sync.Mutex
		first error
	)
	for _, id := range ids {
		sem <- struct{}{}
		if still != nil && !still(id) {
			<-sem
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			rev, err := s.markDue(ctx, id)
			if err != nil {
				errMu.Lock()
				if first == nil {
					first = err
				}
				errMu.Unlock()
				return
			}
			if done != nil {
				done(id, rev)
			}
		})
	}
	wg.Wait()
	return first
}

// adopt indexes the unfinished conversations that replica created after
// sequence watermark and did not index: what a replica that died left in
// its fresh set. It returns their entries.
func (s *store) adopt(ctx context.Context, replica string, watermark uint64) ([]dueEntry, error) {
	seen := map[string]bool{}
	var ids []string
	err := s.bus.ScanHeaders(ctx, bus.StreamConversations, bus.ConversationSubjects, watermark+1, func(m bus.HeaderMsg) bool {
		if m.Header.Get(hdrOrigin) != replica {
			return true
		}
		id := strings.TrimPrefix(m.Subject, convSubjectPrefix)
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("find the conversations of replica %s: %w", replica, err)
	}
	var open []string
	for i := 0; i < len(ids); i += summaryChunk {
		sums, err := s.summaries(ctx, ids[i:min(i+summaryChunk, len(ids))])
		if err != nil {
			return nil, err
		}
		for _, sum := range sums {
			if !sum.Status.Terminal() && sum.Status != conversation.StatusDeleted {
				open = append(open, sum.ID)
			}
		}
	}
	var (
		mu      sync.Mutex
		entries []dueEntry
	)
	err = s.markAllDue(ctx, open, nil, func(id string, rev uint64) {
		mu.Lock()
		entries = append(entries, dueEntry{id: id, rev: rev})
		mu.Unlock()
	})
	if err != nil {
		return nil, fmt.Errorf("index the conversations of replica %s: %w", replica, err)
	}
	return entries, nil
}
