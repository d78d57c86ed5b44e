package orchestrator_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// clientHeap sums the live heap allocated outside the embedded NATS server
// (which shares the test's process but would not share a deployed
// orchestrator's), from a memory profile recording every allocation.
func clientHeap() int64 {
	for range 3 {
		runtime.GC()
	}
	n, _ := runtime.MemProfile(nil, true)
	recs := make([]runtime.MemProfileRecord, n+64)
	n, _ = runtime.MemProfile(recs, true)
	var total int64
	for _, r := range recs[:n] {
		frames := runtime.CallersFrames(r.Stack())
		server := false
		for {
			f, more := frames.Next()
			if strings.HasPrefix(f.Function, "runtime.") && more {
				continue
			}
			// The first frame outside the runtime owns the allocation.
			server = strings.Contains(f.Function, "nats-server/v2/")
			break
		}
		if !server {
			total += r.InUseBytes()
		}
	}
	return total
}

// Paused conversations live in their logs, not in the orchestrator's heap: what a
// paused conversation costs in memory is its deadline index entry.
func TestPausedConversationsStayOutOfMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("profiles the heap over hundreds of runs")
	}
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	t.Cleanup(func() { runtime.MemProfileRate = old })

	e := newEnv(t)
	var ended atomic.Int64
	o, _ := e.orch(orchestrator.Config{OnRunEnd: func(*conversation.State) { ended.Add(1) }})
	for range 10 { // warm up connection, consumers, agent, codecs
		startPaused(t, o)
	}
	// Each batch of n conversations is measured against the heap before
	// it: the second batch's growth is what a paused conversation costs,
	// without what grows once, at the first conversations after the
	// warm-up (buffers and maps of the connection sized by the load).
	const n = 150
	total := 0
	pause := func() {
		total += n
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		published := o.Stats().Published.Load()
		ids := make([]string, 0, n)
		for range n {
			info, err := o.StartRun(ctx, seedPrompt, "")
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, info.ConversationID)
		}
		// Paused, and their calls published: a paused run publishes its batch
		// after the pause is stored, without marking it.
		calls := int64(0)
		for _, id := range ids {
			for {
				c, err := o.Conversation(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if c.Status == conversation.StatusPaused {
					calls += int64(len(c.Batch.Calls))
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("%s never paused: %s", id, describe(c))
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		waitFor(t, "the paused runs' calls published", func() (bool, string) {
			got := o.Stats().Published.Load() - published
			return got >= calls, fmt.Sprintf("%d of %d published", got, calls)
		})
		// What is still on its way is not what a paused conversation costs:
		// the publications' goroutines (OnRunEnd is told as they end), the
		// look at whether the external call's tool has a worker (none here: each
		// conversation's call is told unserved), and the events still queued
		// for the events stream.
		waitFor(t, "every run's end told", func() (bool, string) {
			return ended.Load() >= int64(10+total), fmt.Sprint(ended.Load(), " ends")
		})
		waitFor(t, "every external call told unserved", func() (bool, string) {
			got := o.Stats().UnservedCalls.Load()
			return got >= int64(10+total), fmt.Sprint(got, " told")
		})
		waitFor(t, "every event published", func() (bool, string) {
			n := o.EventsPending()
			return n == 0, fmt.Sprint(n, " events pending")
		})
	}
	before := clientHeap()
	pause()
	middle := clientHeap()
	pause()
	after := clientHeap()
	t.Logf("heap per paused conversation: %d bytes in the first batch, %d in the second", max(middle-before, 0)/n, max(after-middle, 0)/n)
	per := max(after-middle, 0) / n
	// A paused conversation costs its index entries and its cache entry
	// (the state kept encoded), not its decoded state; the bound leaves
	// room for what a state's policy and approvals fields add to those.
	if per > 4096 {
		t.Errorf("heap grew by %d bytes per paused conversation, want at most 4096", per)
	}
}
