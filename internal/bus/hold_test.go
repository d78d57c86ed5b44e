package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

// holdApprovals consumes approval requests on durable, holding each and
// handing it out on the returned channel.
func holdApprovals(t *testing.T, b *bus.Bus, durable string, ackWait time.Duration) (*bus.Subscription, <-chan *bus.Delivery[wire.ApprovalRequest]) {
	t.Helper()
	got := make(chan *bus.Delivery[wire.ApprovalRequest], 4)
	s, err := b.ConsumeApprovals(ctxT(t), durable, "", bus.ConsumeConfig{AckWait: ackWait, MaxDeliver: -1},
		bus.HandlerFunc[wire.ApprovalRequest](func(_ context.Context, d *bus.Delivery[wire.ApprovalRequest]) error {
			if err := d.Hold(); err != nil {
				return err
			}
			got <- d
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	return s, got
}

func consumerInfo(t *testing.T, b *bus.Bus, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := b.JetStream().Consumer(ctxT(t), wire.StreamApprovals, durable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// A held delivery outlives its handler: it is not acked when the handler
// returns, its ack deadline is renewed while it waits (it is not delivered
// again after AckWait), and the holder settles it later.
func TestHeldDeliveryWaitsForItsHolder(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	const ackWait = 2 * time.Second
	s, got := holdApprovals(t, b, "held", ackWait)
	stop(t, s)
	if _, err := b.PublishApproval(ctxT(t), bustest.SampleApproval("run1", "c1")); err != nil {
		t.Fatal(err)
	}
	d := bustest.Recv(t, got, "the request")
	// A control: a durable with the same AckWait that takes the request
	// after the held one did and never acks it. Once the server delivers
	// the control's copy again, AckWait has passed on the server's clock
	// for the held one too.
	ctl, err := b.JetStream().CreateOrUpdateConsumer(ctxT(t), wire.StreamApprovals, jetstream.ConsumerConfig{
		Durable: "control", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait,
	})
	if err != nil {
		t.Fatal(err)
	}
	fetch := func() (uint64, bool) {
		batch, err := ctl.Fetch(1, jetstream.FetchMaxWait(ackWait/4))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			meta, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			return meta.NumDelivered, true
		}
		return 0, false
	}
	if n, ok := fetch(); !ok || n != 1 {
		t.Fatalf("control: delivery %d (%v); want the first", n, ok)
	}
	bustest.Poll(t, wait, "the control's copy delivered again after AckWait", func() (bool, string) {
		n, ok := fetch()
		return ok && n == 2, ""
	})
	select {
	case again := <-got:
		t.Fatalf("delivered again (delivery %d) while held", again.NumDelivered)
	default:
	}
	if info := consumerInfo(t, b, "held"); info.NumAckPending != 1 || info.NumRedelivered != 0 {
		t.Fatalf("while held: %d ack pending, %d redelivered; want 1 and 0", info.NumAckPending, info.NumRedelivered)
	}
	if err := d.Ack(); err != nil {
		t.Fatal(err)
	}
	bustest.Poll(t, wait, "the ack", func() (bool, string) {
		info := consumerInfo(t, b, "held")
		return info.NumAckPending == 0, ""
	})
	if err := d.Hold(); err == nil {
		t.Error("hold of a settled delivery: no error")
	}
}

// A delivery still held when its subscription stops is handed back at
// once: the next consumer of the durable gets it long before AckWait.
func TestHeldDeliveryHandedBackAtStop(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	const ackWait = time.Hour
	s, got := holdApprovals(t, b, "handed", ackWait)
	if _, err := b.PublishApproval(ctxT(t), bustest.SampleApproval("run1", "c1")); err != nil {
		t.Fatal(err)
	}
	d := bustest.Recv(t, got, "the request")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if !d.Done() {
		t.Error("a held delivery not settled by Stop")
	}
	s2, got2 := holdApprovals(t, b, "handed", ackWait)
	stop(t, s2)
	if again := bustest.Recv(t, got2, "the request handed back"); again.NumDelivered != 2 || again.Msg.ToolCallID != "c1" {
		t.Errorf("handed back: delivery %d of %s; want the second of c1", again.NumDelivered, again.Msg.ToolCallID)
	}
}
