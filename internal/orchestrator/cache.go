package orchestrator

import (
	"container/list"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
)

// stateCache keeps the folded states of recently used conversations, each
// with the sequence of the last record folded into it, up to a budget of
// heap bytes, estimated from the sizes of the records folded into them
// (heapPerRecordByte). The least recently used go first, finished ones
// before any other. A state in the cache is never changed: readers get
// clones.
//
// Finished conversations keep at most a share of the budget
// (finishedShare): one is rarely read again (a client's GET, a follow-up
// prompt), and a read that misses folds it from its log; while the cache
// kept them up to the whole budget, every conversation the replica had
// finished stayed on the heap (2.3 KB each in the benchmark, 140 MB after
// 60,000), which every garbage collection marked again: batch-1
// throughput fell with the number of conversations run, about 11 % lower
// after 20,000 than with none kept.
type stateCache struct {
	mu       sync.Mutex
	budget   int64
	used     int64 // of all states
	doneUsed int64 // of the finished ones
	m        map[string]*list.Element
	// open and done hold *cacheEntry, most recent first: the unfinished
	// states and the finished ones.
	open, done list.List
	// evicted is told of the unfinished states put pushed out, outside
	// the lock; nil tells no one.
	evicted *evictionReport
}

type cacheEntry struct {
	id       string
	c        *conversation.State
	seq      uint64
	size     int64
	finished bool
}

// heapPerRecordByte estimates the heap a folded state takes from the bytes
// of its records, in tenths (a state's Go structures and strings against
// its msgpack): the orchestrator's own heap per paused conversation in the
// benchmark's memory case is 1.0 to 1.2 times the records folded into it
// (2.16 KB against about 1.8 KB at 100,000, all it holds included). It was
// 3, which let a 64 MiB cache hold about 13,000 paused conversations
// instead of the 40,000 it was meant to; at 1.5, 256 MiB held about 92,000,
// and a resume of 100,000 in the order they paused missed on 90 % of them
// (each miss evicting the next one needed).
const heapPerRecordByte = 12

// finishedShare is the part of the budget finished states may take, in
// 1/finishedShare: 4 MiB of the default 256 MiB, about 1,400 of the
// benchmark's conversations, the last finished.
const finishedShare = 64

// cacheHeap is the heap estimated for records of n bytes.
func cacheHeap(n int64) int64 { return n * heapPerRecordByte / 10 }

func newStateCache(budget int64) *stateCache {
	return &stateCache{budget: budget, m: map[string]*list.Element{}}
}

// newReportingCache is a cache of budget bytes that tells evicted of the
// unfinished states it pushes out.
func newReportingCache(budget int64, evicted *evictionReport) *stateCache {
	sc := newStateCache(budget)
	sc.evicted = evicted
	return sc
}

// listOf is the list e is in.
func (sc *stateCache) listOf(e *cacheEntry) *list.List {
	if e.finished {
		return &sc.done
	}
	return &sc.open
}

// get returns the cached state of id (not to be changed) and its sequence.
func (sc *stateCache) get(id string) (*conversation.State, uint64, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	el, ok := sc.m[id]
	if !ok {
		return nil, 0, false
	}
	e := el.Value.(*cacheEntry)
	sc.listOf(e).MoveToFront(el)
	return e.c, e.seq, true
}

// peek is get without counting id's state as used.
func (sc *stateCache) peek(id string) (*conversation.State, uint64, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if el, ok := sc.m[id]; ok {
		e := el.Value.(*cacheEntry)
		return e.c, e.seq, true
	}
	return nil, 0, false
}

// unfinished reports whether id's state is cached and not finished (nor
// deleted), without counting it as used.
func (sc *stateCache) unfinished(id string) bool {
	c, _, ok := sc.peek(id)
	return ok && !c.Status.Terminal() && c.Status != conversation.StatusDeleted
}

// size is the size of id's cached state, 0 when not cached.
func (sc *stateCache) size(id string) int64 {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if el, ok := sc.m[id]; ok {
		return el.Value.(*cacheEntry).size
	}
	return 0
}

// put caches c as id's state at seq, unless a later one is cached; c is the
// cache's from now on. A finished conversation (or a deleted one's
// tombstone) is among the first out when room is needed, and never pushes out an unfinished one: put first, the
// conversations a resume of 100,000 had finished pushed out the paused
// ones still waiting (0.76 log reads per conversation with room for all of
// them).
func (sc *stateCache) put(id string, c *conversation.State, seq uint64, size int64) {
	if n := sc.putLocked(id, c, seq, size); n > 0 && sc.evicted != nil {
		sc.evicted.tell(n, sc.budget)
	}
}

// putLocked is put under the lock; it returns how many unfinished states
// it pushed out.
func (sc *stateCache) putLocked(id string, c *conversation.State, seq uint64, size int64) (evicted int) {
	// Cleared before anyone else has c: clone then never writes to a
	// cached state.
	c.ShareRuns()
	sc.mu.Lock()
	defer sc.mu.Unlock()
	finished := c.Status.Ended()
	if el, ok := sc.m[id]; ok {
		e := el.Value.(*cacheEntry)
		if e.seq >= seq {
			return 0
		}
		sc.forget(el)
		e.c, e.seq, e.size, e.finished = c, seq, size, finished
		sc.m[id] = sc.keep(e)
	} else {
		sc.m[id] = sc.keep(&cacheEntry{id: id, c: c, seq: seq, size: size, finished: finished})
	}
	for cacheHeap(sc.doneUsed) > sc.budget/finishedShare && sc.done.Len() > 0 {
		sc.removeElement(sc.done.Back())
	}
	for cacheHeap(sc.used) > sc.budget && sc.open.Len()+sc.done.Len() > 1 {
		el := sc.done.Back()
		if el == nil {
			el = sc.open.Back()
			evicted++
		}
		sc.removeElement(el)
	}
	return evicted
}

// keep puts e first in its list and counts its size.
func (sc *stateCache) keep(e *cacheEntry) *list.Element {
	sc.used += e.size
	if e.finished {
		sc.doneUsed += e.size
	}
	return sc.listOf(e).PushFront(e)
}

// forget takes el out of its list and its size out of the counts; the map
// still has it.
func (sc *stateCache) forget(el *list.Element) {
	e := el.Value.(*cacheEntry)
	sc.listOf(e).Remove(el)
	sc.used -= e.size
	if e.finished {
		sc.doneUsed -= e.size
	}
}

// drop forgets id's state.
func (sc *stateCache) drop(id string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if el, ok := sc.m[id]; ok {
		sc.removeElement(el)
	}
}

func (sc *stateCache) removeElement(el *list.Element) {
	sc.forget(el)
	delete(sc.m, el.Value.(*cacheEntry).id)
}

// len is the number of states cached.
func (sc *stateCache) len() int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.open.Len() + sc.done.Len()
}

// evictionWarnEvery is the least time between two warnings of the cache
// pushing out unfinished states: a resume past the cache's size evicts on
// nearly every put, and one line a minute says it as well as thousands.
const evictionWarnEvery = time.Minute

// evictionReport counts the unfinished states the cache pushes out
// (a metric) and warns of them at most once per evictionWarnEvery. A
// paused state pushed out costs a read of its log when its reply comes
// (StateReads): past the cache's size, a resume reads a log for nearly
// every conversation, several times slower than one that finds them
// cached.
type evictionReport struct {
	log   *slog.Logger
	count func(n int)
	clock func() time.Time

	mu     sync.Mutex
	warned time.Time // zero: never
	since  int       // evicted since the last warning
}

func newEvictionReport(log *slog.Logger, count func(n int), clock func() time.Time) *evictionReport {
	if clock == nil {
		clock = time.Now
	}
	return &evictionReport{log: log, count: count, clock: clock}
}

// tell counts n unfinished states evicted from a cache of budget bytes.
func (r *evictionReport) tell(n int, budget int64) {
	if r.count != nil {
		r.count(n)
	}
	r.mu.Lock()
	r.since += n
	now := r.clock()
	if !r.warned.IsZero() && now.Sub(r.warned) < evictionWarnEvery {
		r.mu.Unlock()
		return
	}
	since := r.since
	r.warned, r.since = now, 0
	r.mu.Unlock()
	if r.log != nil {
		r.log.Warn("state cache full: paused conversations pushed out are read from their logs when resumed, which is slower; raise --state-cache (about 3 KB a paused conversation of a few calls)",
			slog.Int("evicted", since), slog.Int64("cache_bytes", budget), slog.Duration("warning_every", evictionWarnEvery))
	}
}

// defaultStateCacheBytes is the cache's budget when none is configured,
// for a Go memory limit of limit (math.MaxInt64: none): a quarter of the
// limit, at least 64 MiB; 256 MiB (about 90,000 paused conversations of
// the benchmark's, 2.4 KB of records each) without a limit. A resume of more paused
// conversations than the cache holds reads each of the others from its
// log, which made it several times slower past the old 64 MiB.
func defaultStateCacheBytes(limit int64) int64 {
	if limit <= 0 || limit == math.MaxInt64 {
		return 256 << 20
	}
	return max(limit/4, 64<<20)
}
