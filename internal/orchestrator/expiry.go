package orchestrator

import (
	"container/heap"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/deferred"
)

// Messages of calls settled by expiry (D37).
const (
	ExpiredApprovalMessage = "approval expired"
	ExpiredCallMessage     = "timed out"
)

// expiredMetadata is the reason an expired approval carries.
var expiredMetadata = json.RawMessage(`{"reason":"expired"}`)

// expiredBy names the orchestrator as the one that settled an expired call.
const expiredBy = "orchestrator"

func expiredReply(pc *PendingCall, now time.Time) *Reply {
	if pc.Kind == deferred.KindApproval {
		return &Reply{Outcome: OutcomeDenied, Message: ExpiredApprovalMessage, Metadata: expiredMetadata, By: expiredBy, At: now, Expired: true}
	}
	return &Reply{Outcome: OutcomeFailed, Message: ExpiredCallMessage, By: expiredBy, At: now, Expired: true}
}

// deadlineIndex is the one thing kept in memory about paused conversations:
// when each one's earliest pending call expires. Deadlines themselves live in
// KV; the index is rebuilt from it by every reconcile, so losing it loses
// nothing.
type deadlineIndex struct {
	mu   sync.Mutex
	h    deadlineHeap
	next map[string]time.Time // conversation → earliest scheduled deadline
	// wake nudges the expiry loop when an earlier deadline arrives.
	wake chan struct{}
}

type deadlineEntry struct {
	at     time.Time
	convID string
}

type deadlineHeap []deadlineEntry

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(deadlineEntry)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func newDeadlineIndex() *deadlineIndex {
	return &deadlineIndex{next: map[string]time.Time{}, wake: make(chan struct{}, 1)}
}

// add schedules a check of convID at t; it reports whether t is now the
// earliest deadline of all.
func (d *deadlineIndex) add(convID string, t time.Time) bool {
	if t.IsZero() {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur, ok := d.next[convID]; ok && !t.Before(cur) {
		return false
	}
	d.next[convID] = t
	heap.Push(&d.h, deadlineEntry{at: t, convID: convID})
	return d.h[0].at.Equal(t)
}

// due pops the conversations whose scheduled deadline is not after now.
func (d *deadlineIndex) due(now time.Time) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for d.h.Len() > 0 && !d.h[0].at.After(now) {
		e := heap.Pop(&d.h).(deadlineEntry)
		// A stale entry (superseded by an earlier one) is skipped.
		if cur, ok := d.next[e.convID]; ok && cur.Equal(e.at) {
			delete(d.next, e.convID)
			out = append(out, e.convID)
		}
	}
	return out
}

// earliest is the first scheduled deadline, or zero.
func (d *deadlineIndex) earliest() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.h.Len() > 0 {
		e := d.h[0]
		if cur, ok := d.next[e.convID]; ok && cur.Equal(e.at) {
			return e.at
		}
		heap.Pop(&d.h)
	}
	return time.Time{}
}

// schedule adds a conversation's next deadline to the index and wakes the
// expiry loop if it moved earlier.
func (d *deadlineIndex) schedule(c *Conversation) {
	if c == nil || c.Batch == nil {
		return
	}
	if d.add(c.ID, c.Batch.nextDeadline()) {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// maxExpiryNap bounds the expiry loop's sleep, so a clock that jumps is
// noticed.
const maxExpiryNap = time.Minute

func (rc *reconciler) expiryLoop() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		nap := maxExpiryNap
		if t := rc.deadlines.earliest(); !t.IsZero() {
			nap = min(max(t.Sub(rc.clock()), 0), maxExpiryNap)
		}
		timer.Reset(nap)
		select {
		case <-rc.stopping:
			return
		case <-rc.deadlines.wake:
		case <-timer.C:
		}
		for _, id := range rc.deadlines.due(rc.clock()) {
			ctx, cancel := context.WithTimeout(rc.loopCtx, replyTimeout)
			rc.expire(ctx, id)
			cancel()
		}
	}
}

// expire settles the conversation's pending calls whose deadline has passed,
// through the same CAS path as replies, then completes the batch if that
// made it complete (D37).
func (rc *reconciler) expire(ctx context.Context, convID string) {
	var expired []*PendingCall
	conv, err := rc.store.update(ctx, convID, func(c *Conversation) error {
		if expired = c.Expire(rc.clock()); len(expired) == 0 {
			return errUnchanged
		}
		return nil
	})
	if err != nil {
		rc.log.WarnContext(ctx, "expire calls", slog.String("conversation_id", convID), slog.String("error", err.Error()))
		// Try again at the next reconcile, which reschedules it.
		return
	}
	if n := len(expired); n > 0 {
		ids := make([]string, n)
		for i, pc := range expired {
			ids[i] = pc.ToolCallID
			rc.observer.expired(string(pc.Kind))
		}
		rc.log.InfoContext(ctx, "calls expired", slog.String("conversation_id", convID), slog.Int("calls", n))
		rc.events.publish(ctx, convID, conv.Batch.RunID, EventCallsExpired, "", callsExpiredData{Calls: n, ToolCallIDs: ids})
	}
	rc.pipe.afterApply(ctx, conv)
}

// newTicker is time.NewTicker with a floor, so a tiny configured interval
// cannot spin.
func newTicker(d time.Duration) *time.Ticker {
	return time.NewTicker(max(d, 10*time.Millisecond))
}
