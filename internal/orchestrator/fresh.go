package orchestrator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
)

// A conversation is put in the due index only once it has lasted a while:
// most finish within a second of their start (a call answered by a worker,
// a follow-up, the end), and an entry for each would be one stored message
// more per conversation, and a purge. Until then the replica that created
// it keeps it in its fresh set, and its advert (replicas.go) carries a
// watermark: a stream sequence below the first record of every
// conversation in that set, and of every one it will create. Its first
// record names it (hdrOrigin). If the replica dies, another finds its
// conversations by scanning the headers of the conversations' stream from
// the watermark, and indexes the unfinished ones. docs/architecture.md,
// "The due index", gives the reasons.

// hdrOrigin names, on a conversation's first record, the replica that
// created it.
const hdrOrigin = "Toolgate-Origin"

// freshConv is a conversation of the fresh set: the sequence of its first
// record once stored (0 before), the highest sequence known before it was
// written (its first record comes after), and when it was added.
type freshConv struct {
	seq, floor uint64
	since      time.Time
}

// freshSet holds the conversations this replica created and has not
// indexed yet.
type freshSet struct {
	mu sync.Mutex
	m  map[string]freshConv
	// highest is the highest sequence of the conversations' stream this
	// replica knows to be stored: a record written after it was read has
	// a higher one.
	highest atomic.Uint64
}

func newFreshSet() *freshSet { return &freshSet{m: map[string]freshConv{}} }

// saw raises highest to seq.
func (f *freshSet) saw(seq uint64) {
	for {
		h := f.highest.Load()
		if seq <= h || f.highest.CompareAndSwap(h, seq) {
			return
		}
	}
}

// add puts id in the set before its first record is written; it reports
// whether id was not in it already (a second start of a conversation this
// replica created keeps the first's entry, whose record is older).
func (f *freshSet) add(id string, now time.Time) bool {
	floor := f.highest.Load()
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[id]; ok {
		return false
	}
	f.m[id] = freshConv{floor: floor, since: now}
	return true
}

// stored records the sequence of id's first record.
func (f *freshSet) stored(id string, seq uint64) {
	f.saw(seq)
	f.mu.Lock()
	if e, ok := f.m[id]; ok {
		e.seq = seq
		f.m[id] = e
	}
	f.mu.Unlock()
}

// has reports whether id is in the set.
func (f *freshSet) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.m[id]
	return ok
}

// remove takes id out of the set; it reports whether it was in it.
func (f *freshSet) remove(id string) bool {
	f.mu.Lock()
	_, ok := f.m[id]
	delete(f.m, id)
	f.mu.Unlock()
	return ok
}

// len is how many conversations the set holds.
func (f *freshSet) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}

// watermark is a sequence below the first record of every conversation in
// the set and of every one added later.
func (f *freshSet) watermark() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.highest.Load()
	for _, e := range f.m {
		b := e.floor
		if e.seq > 0 {
			b = e.seq - 1
		}
		w = min(w, b)
	}
	return w
}

// addedBefore lists the conversations added before t (all with a zero t).
func (f *freshSet) addedBefore(t time.Time) map[string]freshConv {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]freshConv{}
	for id, e := range f.m {
		if t.IsZero() || e.since.Before(t) {
			out[id] = e
		}
	}
	return out
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
