package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

// The partition the orchestrator computes for a run id is the one the
// stream's transform stores its replies under, and each partition's
// durable gets its replies alone, while the shared durable of replies
// stored as published gets none of them.
func TestRepliesStoredInTheirRunsPartition(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	ctx := ctxT(t)
	n, err := b.ReplyPartitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != bus.DefaultReplyPartitions {
		t.Fatalf("partitions %d, want %d", n, bus.DefaultReplyPartitions)
	}
	runs := map[string]int{}
	for i := range 40 {
		run := fmt.Sprintf("r%dx_c%d", i*7919, i)
		runs[run] = bus.ReplyPartition(run, n)
		if _, err := b.PublishCallReply(ctx, bustest.SampleReply(run, "call1")); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := b.JetStream().OrderedConsumer(ctx, wire.StreamReplies, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for range runs {
		m, err := cons.Next(jetstream.FetchMaxWait(wait))
		if err != nil {
			t.Fatal(err)
		}
		run, _, err := wire.ParseReplySubject(bus.WireReplySubject(m.Subject()))
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%s.%d.%s.call", bus.PrefixReplyPartitioned, runs[run], run)
		if m.Subject() != want {
			t.Errorf("stored as %s, want %s", m.Subject(), want)
		}
		seen[runs[run]] = true
	}
	if len(seen) < 2 {
		t.Fatalf("40 runs in %d partitions", len(seen))
	}

	// Partition p's durable gets the replies of p's runs, decoded.
	var p int
	for q := range seen {
		p = q
		break
	}
	got := make(chan bus.Reply, len(runs))
	s, err := b.ConsumeReplyPartition(ctx, "orch", p, bus.ConsumeConfig{AckWait: 5 * time.Second}, bus.HandlerFunc[bus.Reply](
		func(_ context.Context, d *bus.Delivery[bus.Reply]) error { got <- d.Msg; return nil }))
	if err != nil {
		t.Fatal(err)
	}
	stop(t, s)
	for run, q := range runs {
		if q != p {
			continue
		}
		r := bustest.Recv(t, got, "reply of partition")
		if bus.ReplyPartition(r.RunID, n) != p || r.Call == nil || r.Call.RunID != r.RunID {
			t.Errorf("partition %d's durable got %+v", p, r)
		}
		delete(runs, run)
	}
	select {
	case r := <-got:
		t.Errorf("partition %d's durable got run %s of partition %d", p, r.RunID, bus.ReplyPartition(r.RunID, n))
	default:
	}

	// The shared durable of earlier builds' filter has nothing to take.
	shared, err := b.ConsumeUnpartitionedReplies(ctx, "shared", bus.ConsumeConfig{}, bus.HandlerFunc[bus.Reply](
		func(context.Context, *bus.Delivery[bus.Reply]) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	stop(t, shared)
	c, err := b.JetStream().Consumer(ctx, wire.StreamReplies, "shared")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumPending != 0 || info.Delivered.Stream != 0 {
		t.Errorf("shared durable: %d pending, delivered up to %d; want none", info.NumPending, info.Delivered.Stream)
	}
}

// A partitioned reply made a dead letter is told with the subject it was
// published on, not the one it is stored under.
func TestPartitionedDeadLetterKeepsTheWireSubject(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	ctx := ctxT(t)
	after := streamMsgs(t, b, wire.StreamDLQ)
	consumeReplies(t, b, "orch", bus.ConsumeConfig{AckWait: 5 * time.Second}, func(context.Context, *bus.Delivery[bus.Reply]) error {
		t.Error("a reply whose body names another run reached the handler")
		return nil
	})
	body, err := wire.Encode(bustest.SampleReply("rother_c1", "call1"), wire.ContentTypeJSON)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(wire.PrefixReply + ".rmine_c1.call")
	m.Header.Set(wire.HeaderContentType, wire.ContentTypeJSON)
	m.Data = body
	if _, err := b.JetStream().PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	dl := nextDeadLetter(t, b, after)
	if dl.Subject != wire.PrefixReply+".rmine_c1.call" {
		t.Errorf("dead letter's subject %q, want the one published on", dl.Subject)
	}
}

func TestWireReplySubject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ stored, want string }{
		{"toolgate.replyp.3.r1_c1.call", "toolgate.reply.r1_c1.call"},
		{"toolgate.reply.r1_c1.approval", "toolgate.reply.r1_c1.approval"},
		{"toolgate.replyp", "toolgate.replyp"},
		{"toolgate.call.x", "toolgate.call.x"},
	} {
		if got := bus.WireReplySubject(tc.stored); got != tc.want {
			t.Errorf("WireReplySubject(%q) = %q, want %q", tc.stored, got, tc.want)
		}
	}
}

// A stream keeps the partitions it was set up with, whatever a later
// Setup asks for; one set up without any stores replies as published.
func TestSetupKeepsTheReplyPartitions(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	b := bustest.NewBus(t)
	for _, want := range []int{6, -1} {
		if err := b.Setup(ctx, bus.SetupConfig{ReplyPartitions: want}); err != nil {
			t.Fatal(err)
		}
		if n, err := b.ReplyPartitions(ctx); err != nil || n != bus.DefaultReplyPartitions {
			t.Errorf("after a setup asking for %d: %d partitions (%v), want %d", want, n, err, bus.DefaultReplyPartitions)
		}
	}

	none := bustest.Connect(t, bustest.NewServer(t), "none")
	if err := none.Setup(ctx, bus.SetupConfig{ReplyPartitions: -1}); err != nil {
		t.Fatal(err)
	}
	if n, err := none.ReplyPartitions(ctx); err != nil || n != 0 {
		t.Fatalf("set up with none: %d partitions (%v)", n, err)
	}
	got := make(chan bus.Reply, 1)
	s, err := none.ConsumeUnpartitionedReplies(ctx, "shared", bus.ConsumeConfig{}, bus.HandlerFunc[bus.Reply](
		func(_ context.Context, d *bus.Delivery[bus.Reply]) error { got <- d.Msg; return nil }))
	if err != nil {
		t.Fatal(err)
	}
	stop(t, s)
	if _, err := none.PublishCallReply(ctx, bustest.SampleReply("r1_c1", "call1")); err != nil {
		t.Fatal(err)
	}
	if r := bustest.Recv(t, got, "reply"); r.RunID != "r1_c1" {
		t.Errorf("got %+v", r)
	}
}
