package orchestrator

import (
	"container/heap"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
)

// deadlineIndex is the one thing kept in memory about paused conversations:
// when each one's earliest pending call expires. Deadlines themselves live in
// the conversations' logs; the index is rebuilt from them by every
// reconcile, so losing it loses nothing.
//
// A conversation has one entry, taken out when its batch is complete or it
// has finished: kept until its deadline (ten minutes by default), the
// entries of conversations long done grew with the rate of calls, 60,000
// of them after 60,000 batch-1 calls (15 MB, half of the orchestrator's
// heap that outlived the calls), and at a sustained 3,000 calls a second
// would have reached 1.8 million.
type deadlineIndex struct {
	mu   sync.Mutex
	h    deadlineHeap
	next map[string]*deadlineEntry // conversation → its entry in h
	// wake nudges the expiry loop when an earlier deadline arrives.
	wake chan struct{}
}

type deadlineEntry struct {
	at     time.Time
	convID string
	i      int // in the heap
}

type deadlineHeap []*deadlineEntry

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *deadlineHeap) Push(x any) {
	e := x.(*deadlineEntry)
	e.i = len(*h)
	*h = append(*h, e)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}

func newDeadlineIndex() *deadlineIndex {
	return &deadlineIndex{next: map[string]*deadlineEntry{}, wake: make(chan struct{}, 1)}
}

// add schedules a check of convID at t, unless one is scheduled no later;
// it reports whether t is now the earliest deadline of all.
func (d *deadlineIndex) add(convID string, t time.Time) bool {
	if t.IsZero() {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.next[convID]
	switch {
	case !ok:
		e = &deadlineEntry{at: t, convID: convID}
		d.next[convID] = e
		heap.Push(&d.h, e)
	case t.Before(e.at):
		e.at = t
		heap.Fix(&d.h, e.i)
	default:
		return false
	}
	return d.h[0] == e
}

// forget takes convID's entry out.
func (d *deadlineIndex) forget(convID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.next[convID]; ok {
		heap.Remove(&d.h, e.i)
		delete(d.next, convID)
	}
}

// len is the number of conversations scheduled.
func (d *deadlineIndex) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.next)
}

// due takes out the conversations whose deadline is not after now.
func (d *deadlineIndex) due(now time.Time) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for d.h.Len() > 0 && !d.h[0].at.After(now) {
		e := heap.Pop(&d.h).(*deadlineEntry)
		delete(d.next, e.convID)
		out = append(out, e.convID)
	}
	return out
}

// earliest is the first scheduled deadline, or zero.
func (d *deadlineIndex) earliest() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.h.Len() > 0 {
		return d.h[0].at
	}
	return time.Time{}
}

// schedule keeps the index to c: its next deadline added (waking the
// expiry loop if it moved earlier), or its entry taken out when it has
// nothing left to expire.
func (d *deadlineIndex) schedule(c *conversation.State) {
	if c == nil {
		return
	}
	next := c.Batch.NextDeadline()
	if next.IsZero() || c.Status.Ended() {
		d.forget(c.ID)
		return
	}
	if d.add(c.ID, next) {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}
