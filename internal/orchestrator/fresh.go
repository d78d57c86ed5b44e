package orchestrator

import (
	"sync"
	"sync/atomic"
	"time"
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
