package orchestrator_test

import (
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/orchestrator"
)

// steppedClock is a clock that moves only when a test steps it.
type steppedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *steppedClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *steppedClock) step(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.now = c.now.Add(d) }

// A reconcile pass leaves a batch just paused to the run that published
// it: it neither publishes it again nor appends a mark, a write that would
// race the replies on their way (a refused append and a catch-up for each
// it met). Once the batch has waited a reconcile interval (at most 30 s),
// a pass marks what is unmarked, within the stream's 2-minute duplicate
// window; the replica that saw the calls stored does not publish them
// again. Before, every pass marked every fresh batch, and the mark came
// with a publication the stream dropped.
func TestReconcileLeavesAFreshBatchToItsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clock := &steppedClock{now: time.Now()}
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Clock: clock.Now, ReconcileInterval: time.Hour})
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	// Paused, and the run's own publication of its call done.
	c := waitPublished(t, o, info.ConversationID, 1)
	call := c.Batch.Calls[0].ToolCallID
	writes, published := o.Stats().StateWrites.Load(), o.Stats().Published.Load()

	if err := o.Reconcile(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if w, p := o.Stats().StateWrites.Load()-writes, o.Stats().Published.Load()-published; w != 0 || p != 0 {
		t.Errorf("a pass right after the pause made %d writes and %d publications, want none", w, p)
	}
	if c, err = o.Conversation(ctxT(t), info.ConversationID); err != nil || pendingCall(t, c, call).Published {
		t.Fatalf("after a pass right after the pause: %v, published %v", err, c != nil && pendingCall(t, c, call).Published)
	}

	clock.step(30 * time.Second)
	if err := o.Reconcile(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if c, err = o.Conversation(ctxT(t), info.ConversationID); err != nil || !pendingCall(t, c, call).Published {
		t.Fatalf("30 s after the pause the pass did not mark the batch: %v %s", err, describe(c))
	}
	if p := o.Stats().Published.Load() - published; p != 0 {
		t.Errorf("%d publications 30 s after the pause, want none (the calls were seen stored)", p)
	}
}

// A replica that did not see a batch's calls stored (another ran it, or
// it restarted since) publishes them again before marking them, under the
// same message ids: the stream drops the repeat, and a call whose first
// publication was lost is delivered now.
func TestReconcileRepublishesWhatItDidNotSeeStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clock := &steppedClock{now: time.Now()}
	cfg := orchestrator.Config{Agent: externalAgent(t, ""), Clock: clock.Now, ReconcileInterval: time.Hour}
	ran, _ := e.orch(cfg)
	other, _ := e.orch(cfg)
	info, err := ran.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitPublished(t, ran, info.ConversationID, 1)
	call := c.Batch.Calls[0].ToolCallID
	if err := ran.IndexNow(ctxT(t), info.ConversationID); err != nil {
		t.Fatal(err)
	}

	clock.step(30 * time.Second)
	published := other.Stats().Published.Load()
	if err := other.Reconcile(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if p := other.Stats().Published.Load() - published; p != 1 {
		t.Errorf("the other replica published %d calls, want 1 (a repeat the stream drops)", p)
	}
	if c, err = other.Conversation(ctxT(t), info.ConversationID); err != nil || !pendingCall(t, c, call).Published {
		t.Fatalf("the other replica's pass did not mark the batch: %v %s", err, describe(c))
	}
	// The call was a repeat the stream dropped: its tool_unserved event
	// (no worker runs) is the first replica's to tell, not told again.
	if n, w := other.Stats().UnservedCalls.Load(), orchestrator.UnservedPending(other); n != 0 || w != 0 {
		t.Errorf("the other replica told %d calls unserved and has %d waiting to be, want none", n, w)
	}
	if n := orchestrator.StoredRuns(ran); n != 1 {
		t.Errorf("the replica that ran it holds %d runs seen stored, want 1", n)
	}
	// What reconcile publishes it marks at once: nothing is left for a
	// later pass to take.
	if n := orchestrator.StoredRuns(other); n != 0 {
		t.Errorf("the replica whose pass published the batch holds %d runs seen stored, want 0", n)
	}
}
