package bus_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// A worker written in another language only binds to call_<tool>: the
// orchestrator's first publication for the tool creates it with the
// settings that carry the guarantees, so a call the foreign worker keeps
// failing ends "exhausted 5 deliveries", not by its deadline.
func TestForeignWorkerBindsToTheCallConsumer(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	orch := bustest.Connect(t, srv, "orchestrator")
	bustest.Setup(t, orch)
	ctx := bustest.Context(t)

	md, err := orch.HandleMaxDeliveries(ctx, bus.MaxDeliveriesConfig{})
	if err != nil {
		t.Fatal(err)
	}
	stop(t, md)
	replies := make(chan bus.Reply, 4)
	consumeReplies(t, orch, "orchestrator", bus.ConsumeConfig{AckWait: 2 * time.Second},
		func(_ context.Context, d *bus.Delivery[bus.Reply]) error { replies <- d.Msg; return nil })

	call := bustest.SampleCall("run1", "c1")
	call.ToolName = "flaky"
	o, err := bus.CallMessage(call)
	if err != nil {
		t.Fatal(err)
	}
	// The orchestrator's path: publishBatch hands its calls to PublishBatch.
	if err := orch.PublishBatch(ctx, []bus.Outgoing{o}); err != nil {
		t.Fatal(err)
	}

	// A plain NATS client, as another language has: no toolgate code.
	nc, err := nats.Connect(srv.ClientURL(), nats.Name("foreign worker"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.Consumer(ctx, bus.StreamCalls, "call_flaky")
	if err != nil {
		t.Fatalf("bind to call_flaky before any tool-worker ran: %v", err)
	}
	want, err := bus.CallConsumerConfig("flaky")
	if err != nil {
		t.Fatal(err)
	}
	got := cons.CachedInfo().Config
	if got.MaxDeliver != 5 || got.MaxDeliver != want.MaxDeliver || got.AckWait != want.AckWait ||
		got.AckPolicy != jetstream.AckExplicitPolicy || got.FilterSubject != "toolgate.call.flaky" ||
		got.MaxAckPending != want.MaxAckPending {
		t.Errorf("call_flaky: %+v, want %+v", got, want)
	}

	var deliveries atomic.Int64
	cc, err := cons.Consume(func(m jetstream.Msg) {
		deliveries.Add(1)
		_ = m.Nak() // the call keeps failing
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)

	r := bustest.Recv(t, replies, "the failed reply")
	if r.Call == nil || r.Call.Outcome != bus.OutcomeFailed || r.Call.Message != "exhausted 5 deliveries" || r.Call.ToolCallID != "c1" {
		t.Fatalf("reply %+v, want failed \"exhausted 5 deliveries\"", r.Call)
	}
	if n := deliveries.Load(); n != 5 {
		t.Errorf("the foreign worker got %d deliveries, want 5", n)
	}
}

// A tool-worker's own settings (here a shorter ack wait) are not undone by
// the orchestrator's publications.
func TestCallConsumerKeepsAWorkersSettings(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	orch := bustest.Connect(t, srv, "orchestrator")
	bustest.Setup(t, orch)
	worker := bustest.Connect(t, srv, "worker")
	consumeCalls(t, worker, "weather", bus.ConsumeConfig{AckWait: 3 * time.Second},
		func(context.Context, *bus.Delivery[bus.CallRequest]) error { return nil })
	publishCall(t, orch, bustest.SampleCall("run1", "c1"))
	cons, err := orch.JetStream().Consumer(bustest.Context(t), bus.StreamCalls, "call_weather")
	if err != nil {
		t.Fatal(err)
	}
	if got := cons.CachedInfo().Config.AckWait; got != 3*time.Second {
		t.Errorf("ack wait %s after the orchestrator published, want the worker's 3s", got)
	}
}
