package bus_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every blocking wait in these tests.
const wait = bustest.Timeout

func testLogger(t *testing.T) *slog.Logger { return bustest.LevelLogger(t, slog.LevelWarn) }

func ctxT(t *testing.T) context.Context { return bustest.Context(t) }

func stop(t *testing.T, s *bus.Subscription) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}

// consumeCalls consumes tool's calls with fn until the test ends.
func consumeCalls(t *testing.T, b *bus.Bus, tool string, cfg bus.ConsumeConfig, fn func(context.Context, *bus.Delivery[wire.CallRequest]) error) *bus.Subscription {
	t.Helper()
	s, err := b.ConsumeCalls(ctxT(t), tool, cfg, bus.HandlerFunc[wire.CallRequest](fn))
	if err != nil {
		t.Fatal(err)
	}
	stop(t, s)
	return s
}

// consumeReplies consumes replies as durable with fn until the test ends.
func consumeReplies(t *testing.T, b *bus.Bus, durable string, cfg bus.ConsumeConfig, fn func(context.Context, *bus.Delivery[bus.Reply]) error) {
	t.Helper()
	s, err := b.ConsumeReplies(ctxT(t), durable, cfg, bus.HandlerFunc[bus.Reply](fn))
	if err != nil {
		t.Fatal(err)
	}
	stop(t, s)
}

func publishCall(t *testing.T, b *bus.Bus, c wire.CallRequest) {
	t.Helper()
	if _, err := b.PublishCall(ctxT(t), c); err != nil {
		t.Fatalf("publish call %s: %v", c.ToolCallID, err)
	}
}

// nextDeadLetter waits for the next message of TOOLGATE_DLQ after seq.
func nextDeadLetter(t *testing.T, b *bus.Bus, after uint64) bus.DeadLetter {
	t.Helper()
	ctx := ctxT(t)
	cons, err := b.JetStream().OrderedConsumer(ctx, wire.StreamDLQ, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: after + 1,
	})
	if err != nil {
		t.Fatalf("dlq consumer: %v", err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatalf("waiting for a dead letter: %v", err)
	}
	meta, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	dl, err := b.GetDeadLetter(ctx, meta.Sequence.Stream)
	if err != nil {
		t.Fatalf("get dead letter: %v", err)
	}
	return dl
}

func streamMsgs(t *testing.T, b *bus.Bus, stream string) uint64 {
	return bustest.StreamMsgs(t, b, stream)
}

var deadline = bustest.SampleDeadline
