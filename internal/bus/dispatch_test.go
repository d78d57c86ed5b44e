package bus_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/wire"
)

// With Dispatch, handlers that wait for one another all run at once, up to
// Concurrency: each message gets its own handler, none waits behind
// another's prefetched message. Twelve handlers that each wait until all
// twelve have begun finish; every message is acked once.
func TestDispatchRunsWaitingHandlersTogether(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, embedded.ServerConfig{})
	b := bustest.Connect(t, srv, "dispatch")
	bustest.Setup(t, b)
	const n = 12
	var (
		mu      sync.Mutex
		begun   int
		all     = make(chan struct{})
		handled atomic.Int32
		done    = make(chan struct{})
		maxRun  atomic.Int32
		running atomic.Int32
	)
	// All are stored before the consumer starts, so that its first pull
	// takes them all at once.
	for i := range n {
		if _, err := b.PublishCallReply(ctxT(t), bustest.SampleReply("run1", fmt.Sprintf("c%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	consumeReplies(t, b, "dispatch", bus.ConsumeConfig{Dispatch: true, Concurrency: n, PullMaxMessages: n},
		func(ctx context.Context, d *bus.Delivery[bus.Reply]) error {
			r := running.Add(1)
			defer running.Add(-1)
			for {
				m := maxRun.Load()
				if r <= m || maxRun.CompareAndSwap(m, r) {
					break
				}
			}
			mu.Lock()
			begun++
			if begun == n {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-ctx.Done():
				return ctx.Err()
			}
			if handled.Add(1) == n {
				close(done)
			}
			return nil
		})
	select {
	case <-done:
	case <-ctxT(t).Done():
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("only %d of %d handlers began together", begun, n)
	}
	if m := maxRun.Load(); m > n {
		t.Errorf("%d handlers at once, Concurrency is %d", m, n)
	}
	// Every message is acked (the handlers returned nil).
	cons, err := b.JetStream().Consumer(ctxT(t), wire.StreamReplies, "dispatch")
	if err != nil {
		t.Fatal(err)
	}
	bustest.Poll(t, wait, "every reply acked", func() (bool, string) {
		info, err := cons.Info(ctxT(t))
		if err != nil {
			return false, err.Error()
		}
		if info.Delivered.Consumer != n {
			t.Fatalf("%d deliveries, want %d", info.Delivered.Consumer, n)
		}
		return info.NumAckPending == 0 && info.NumPending == 0, fmt.Sprintf("%d unacked", info.NumAckPending)
	})
}

// Consumers given the same Slots share its capacity: two durables, each
// allowed ten handlers of its own, run three at once in all while every
// message of both is delivered and waiting; once let go, all are handled.
func TestDispatchConsumersShareSlots(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, embedded.ServerConfig{})
	b := bustest.Connect(t, srv, "slots")
	bustest.Setup(t, b)
	const n, cap = 10, 3
	for i := range n {
		if _, err := b.PublishCallReply(ctxT(t), bustest.SampleReply("run1", fmt.Sprintf("c%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var (
		running, maxRun, handled atomic.Int32
		gate                     = make(chan struct{})
	)
	slots := make(chan struct{}, cap)
	h := func(ctx context.Context, d *bus.Delivery[bus.Reply]) error {
		r := running.Add(1)
		defer running.Add(-1)
		for {
			m := maxRun.Load()
			if r <= m || maxRun.CompareAndSwap(m, r) {
				break
			}
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		handled.Add(1)
		return nil
	}
	for _, durable := range []string{"slots_a", "slots_b"} {
		consumeReplies(t, b, durable, bus.ConsumeConfig{Dispatch: true, Concurrency: n, PullMaxMessages: n, Slots: slots}, h)
	}
	// Every message of both durables is out to the client: the handlers
	// not running wait for a slot.
	for _, durable := range []string{"slots_a", "slots_b"} {
		cons, err := b.JetStream().Consumer(ctxT(t), wire.StreamReplies, durable)
		if err != nil {
			t.Fatal(err)
		}
		bustest.Poll(t, wait, durable+" delivered every reply", func() (bool, string) {
			info, err := cons.Info(ctxT(t))
			if err != nil {
				return false, err.Error()
			}
			return info.NumAckPending == n, fmt.Sprintf("%d delivered and unacked", info.NumAckPending)
		})
	}
	bustest.Poll(t, wait, "the slots full", func() (bool, string) {
		r := running.Load()
		return r >= cap, fmt.Sprintf("%d running", r)
	})
	close(gate)
	bustest.Poll(t, wait, "every reply handled", func() (bool, string) {
		h := handled.Load()
		return h == 2*n, fmt.Sprintf("%d handled", h)
	})
	if m := maxRun.Load(); m != cap {
		t.Errorf("%d handlers at once across the two consumers, want %d (their shared slots)", m, cap)
	}
}
