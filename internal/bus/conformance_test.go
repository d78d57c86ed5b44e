package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

// runBusConformance checks the behaviour every bus must have; newBus
// returns a set-up bus on a fresh server.
func runBusConformance(t *testing.T, newBus func(t *testing.T) *bus.Bus) {
	fast := bus.ConsumeConfig{AckWait: 5 * time.Second, BackOff: []time.Duration{10 * time.Millisecond}}

	t.Run("call round trip", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		want := bustest.SampleCall("run1", "c1")
		got := make(chan *bus.Delivery[wire.CallRequest], 1)
		consumeCalls(t, b, "weather", fast,
			func(_ context.Context, d *bus.Delivery[wire.CallRequest]) error { got <- d; return nil })
		publishCall(t, b, want)
		d := bustest.Recv(t, got, "call")
		if diff := cmp.Diff(want, d.Msg); diff != "" {
			t.Errorf("call (-want +got):\n%s", diff)
		}
		if d.Header.Get(wire.HeaderRun) != "run1" || d.Header.Get(wire.HeaderCall) != "c1" || d.Header.Get(wire.HeaderConversation) != "conv1" {
			t.Errorf("id headers: %v", d.Header)
		}
		if d.NumDelivered != 1 || d.StreamSeq == 0 || d.Subject != "toolgate.call.weather" {
			t.Errorf("metadata: delivered %d seq %d subject %s", d.NumDelivered, d.StreamSeq, d.Subject)
		}
	})

	t.Run("approval round trip", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		want := bustest.SampleApproval("run1", "c2")
		// Two approvers each see every request.
		got1 := make(chan wire.ApprovalRequest, 1)
		got2 := make(chan wire.ApprovalRequest, 1)
		for name, ch := range map[string]chan wire.ApprovalRequest{"bot": got1, "human": got2} {
			s, err := b.ConsumeApprovals(bustest.Context(t), name, "", fast, bus.HandlerFunc[wire.ApprovalRequest](
				func(_ context.Context, d *bus.Delivery[wire.ApprovalRequest]) error { ch <- d.Msg; return nil }))
			if err != nil {
				t.Fatal(err)
			}
			stop(t, s)
		}
		if _, err := b.PublishApproval(bustest.Context(t), want); err != nil {
			t.Fatal(err)
		}
		for _, ch := range []chan wire.ApprovalRequest{got1, got2} {
			if diff := cmp.Diff(want, bustest.Recv(t, ch, "approval")); diff != "" {
				t.Errorf("approval (-want +got):\n%s", diff)
			}
		}
	})

	t.Run("replies round trip", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		reply := bustest.SampleReply("run1", "c1")
		dec := bustest.SampleDecision("run1", "c2")
		got := make(chan bus.Reply, 2)
		consumeReplies(t, b, "orchestrator", fast,
			func(_ context.Context, d *bus.Delivery[bus.Reply]) error { got <- d.Msg; return nil })
		if _, err := b.PublishCallReply(bustest.Context(t), reply); err != nil {
			t.Fatal(err)
		}
		if _, err := b.PublishDecision(bustest.Context(t), dec); err != nil {
			t.Fatal(err)
		}
		want := []bus.Reply{
			{Kind: wire.ReplyKindCall, RunID: "run1", Call: &reply},
			{Kind: wire.ReplyKindApproval, RunID: "run1", Decision: &dec},
		}
		for i := range want {
			if diff := cmp.Diff(want[i], bustest.Recv(t, got, "reply")); diff != "" {
				t.Errorf("reply %d (-want +got):\n%s", i, diff)
			}
		}
	})

	t.Run("events round trip", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		evs := []wire.Event{
			{ConversationID: "conv1", RunID: "run1", Type: "tool_call", ToolCallID: "c1", Data: json.RawMessage(`{"a":1}`), Time: deadline},
			{ConversationID: "conv2", Type: "other", Time: deadline},
			{ConversationID: "conv1", RunID: "run2", Type: "done", Time: deadline},
		}
		for _, e := range evs {
			if _, err := b.PublishEvent(bustest.Context(t), e); err != nil {
				t.Fatal(err)
			}
		}
		var got []wire.Event
		var seqs []uint64
		for se, err := range b.Events(bustest.Context(t), "conv1", 0) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, se.Event)
			seqs = append(seqs, se.Seq)
			if len(got) == 2 {
				break
			}
		}
		if diff := cmp.Diff([]wire.Event{evs[0], evs[2]}, got); diff != "" {
			t.Errorf("events (-want +got):\n%s", diff)
		}
		// Resuming after the first yields the second.
		for se, err := range b.Events(bustest.Context(t), "conv1", seqs[0]) {
			if err != nil {
				t.Fatal(err)
			}
			if se.Seq != seqs[1] {
				t.Errorf("resumed at seq %d, want %d", se.Seq, seqs[1])
			}
			break
		}
	})

	t.Run("duplicate publish is stored once", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		r := bustest.SampleReply("run1", "c1")
		if _, err := b.PublishCallReply(bustest.Context(t), r); err != nil {
			t.Fatal(err)
		}
		r.WorkerID = "w2"
		ack, err := b.PublishCallReply(bustest.Context(t), r)
		if err != nil {
			t.Fatal(err)
		}
		if !ack.Duplicate {
			t.Error("second publish not reported as duplicate")
		}
		if n := bustest.StreamMsgs(t, b, wire.StreamReplies); n != 1 {
			t.Errorf("replies stream holds %d messages, want 1", n)
		}
		// Decisions of different approvers are not duplicates of each other.
		d := bustest.SampleDecision("run1", "c1")
		for _, who := range []string{"alice", "bob", "alice"} {
			d.ApproverID = who
			if _, err := b.PublishDecision(bustest.Context(t), d); err != nil {
				t.Fatal(err)
			}
		}
		if n := bustest.StreamMsgs(t, b, wire.StreamReplies); n != 3 {
			t.Errorf("replies stream holds %d messages, want 3", n)
		}
	})

	t.Run("poison message is dead-lettered, not handled", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		var handled atomic.Int32
		consumeCalls(t, b, "weather", fast,
			func(context.Context, *bus.Delivery[wire.CallRequest]) error { handled.Add(1); return nil })
		// Raw publishes past the codec: garbage, and a valid body that
		// fails validation.
		hdr := nats.Header{"X-Trace": []string{"t1"}}
		if _, err := b.JetStream().PublishMsg(bustest.Context(t), &nats.Msg{Subject: "toolgate.call.weather", Data: []byte{0xc1, 0x00}, Header: hdr}); err != nil {
			t.Fatal(err)
		}
		dl := nextDeadLetter(t, b, 0)
		if dl.Kind != bus.DLQDecode || dl.Subject != "toolgate.call.weather" || dl.Stream != wire.StreamCalls || dl.StreamSeq != 1 {
			t.Errorf("dead letter = kind %q subject %q stream %q seq %d", dl.Kind, dl.Subject, dl.Stream, dl.StreamSeq)
		}
		if dl.Reason == "" || dl.Header.Get("X-Trace") != "t1" || string(dl.Data) != "\xc1\x00" {
			t.Errorf("dead letter lost reason, headers or data: %+v", dl)
		}
		bad := bustest.SampleCall("run1", "c1")
		bad.Args = json.RawMessage(`[1,2]`)
		data, err := json.Marshal(bad)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.JetStream().PublishMsg(bustest.Context(t), &nats.Msg{Subject: "toolgate.call.weather", Data: data,
			Header: nats.Header{wire.HeaderContentType: []string{wire.ContentTypeJSON}}}); err != nil {
			t.Fatal(err)
		}
		dl = nextDeadLetter(t, b, dl.Seq)
		if dl.Kind != bus.DLQInvalid || !strings.Contains(dl.Reason, "args") {
			t.Errorf("dead letter = kind %q reason %q, want invalid naming args", dl.Kind, dl.Reason)
		}
		// The good call behind them still flows, and the poison is gone
		// from the work queue (terminated).
		done := make(chan struct{})
		consumeCalls(t, b, "other", fast,
			func(context.Context, *bus.Delivery[wire.CallRequest]) error { close(done); return nil })
		c := bustest.SampleCall("run1", "c9")
		c.ToolName = "other"
		publishCall(t, b, c)
		bustest.Recv(t, done, "good call")
		if handled.Load() != 0 {
			t.Errorf("handler saw %d poison messages", handled.Load())
		}
		bustest.WaitFor(t, "work queue empty", func() bool { return bustest.StreamMsgs(t, b, wire.StreamCalls) == 0 })
	})

	t.Run("reply body must match its subject", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		var handled atomic.Int32
		consumeReplies(t, b, "orchestrator", fast,
			func(context.Context, *bus.Delivery[bus.Reply]) error { handled.Add(1); return nil })
		// A decision body published on a result subject.
		data, err := wire.Encode(bustest.SampleDecision("run1", "c1"), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.JetStream().Publish(bustest.Context(t), "toolgate.reply.run1.call", data); err != nil {
			t.Fatal(err)
		}
		dl := nextDeadLetter(t, b, 0)
		if dl.Kind != bus.DLQInvalid {
			t.Errorf("kind %q reason %q", dl.Kind, dl.Reason)
		}
		// A result for another run than its subject says.
		if _, err := b.Publish(bustest.Context(t), "toolgate.reply.run2.call", "x", bustest.SampleReply("run1", "c1")); err != nil {
			t.Fatal(err)
		}
		dl = nextDeadLetter(t, b, dl.Seq)
		if dl.Kind != bus.DLQInvalid || !strings.Contains(dl.Reason, "run_id") {
			t.Errorf("kind %q reason %q", dl.Kind, dl.Reason)
		}
		if handled.Load() != 0 {
			t.Errorf("handler saw %d mismatched replies", handled.Load())
		}
	})

	t.Run("handler error redelivers after delay", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		got := make(chan uint64, 3)
		consumeCalls(t, b, "weather", fast,
			func(_ context.Context, d *bus.Delivery[wire.CallRequest]) error {
				got <- d.NumDelivered
				switch d.NumDelivered {
				case 1:
					return errors.New("transient")
				case 2:
					panic("boom")
				}
				return nil
			})
		publishCall(t, b, bustest.SampleCall("run1", "c1"))
		for want := uint64(1); want <= 3; want++ {
			if n := bustest.Recv(t, got, "delivery"); n != want {
				t.Fatalf("delivery %d, want %d", n, want)
			}
		}
		bustest.WaitFor(t, "acked", func() bool { return bustest.StreamMsgs(t, b, wire.StreamCalls) == 0 })
	})

	t.Run("explicit nak with delay", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		got := make(chan time.Time, 2)
		consumeCalls(t, b, "weather", fast,
			func(_ context.Context, d *bus.Delivery[wire.CallRequest]) error {
				got <- time.Now()
				if d.NumDelivered == 1 {
					return d.NakWithDelay(300 * time.Millisecond)
				}
				return nil
			})
		publishCall(t, b, bustest.SampleCall("run1", "c1"))
		t1 := bustest.Recv(t, got, "first delivery")
		t2 := bustest.Recv(t, got, "redelivery")
		if d := t2.Sub(t1); d < 250*time.Millisecond {
			t.Errorf("redelivered after %s, want ≥ 300ms", d)
		}
	})

	t.Run("terminal handler error dead-letters", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		consumeCalls(t, b, "weather", fast,
			func(context.Context, *bus.Delivery[wire.CallRequest]) error {
				return bus.Terminal(errors.New("tool is gone"))
			})
		publishCall(t, b, bustest.SampleCall("run1", "c1"))
		dl := nextDeadLetter(t, b, 0)
		if dl.Kind != bus.DLQHandler || dl.Reason != "tool is gone" || dl.Header.Get(wire.HeaderRun) != "run1" {
			t.Errorf("dead letter %+v", dl)
		}
		bustest.WaitFor(t, "termed", func() bool { return bustest.StreamMsgs(t, b, wire.StreamCalls) == 0 })
	})

	t.Run("max deliveries become a dead letter and a failed reply", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		cfg := fast
		cfg.MaxDeliver = 2
		consumeCalls(t, b, "weather", cfg,
			func(context.Context, *bus.Delivery[wire.CallRequest]) error { return errors.New("always") })
		md, err := b.HandleMaxDeliveries(bustest.Context(t), bus.MaxDeliveriesConfig{})
		if err != nil {
			t.Fatal(err)
		}
		stop(t, md)
		replies := make(chan bus.Reply, 1)
		consumeReplies(t, b, "orchestrator", fast,
			func(_ context.Context, d *bus.Delivery[bus.Reply]) error { replies <- d.Msg; return nil })
		publishCall(t, b, bustest.SampleCall("run1", "c1"))
		r := bustest.Recv(t, replies, "failed reply")
		want := bus.Reply{Kind: wire.ReplyKindCall, RunID: "run1", Call: &wire.CallReply{
			RunID: "run1", ToolCallID: "c1", Outcome: wire.OutcomeFailed, Message: "exhausted 2 deliveries", WorkerID: "toolgate",
		}}
		if diff := cmp.Diff(want, r); diff != "" {
			t.Errorf("reply (-want +got):\n%s", diff)
		}
		dl := nextDeadLetter(t, b, 0)
		if dl.Kind != bus.DLQMaxDeliveries || dl.Stream != wire.StreamCalls || dl.Reason != "exhausted 2 deliveries" {
			t.Errorf("dead letter %+v", dl)
		}
		bustest.WaitFor(t, "call deleted", func() bool { return bustest.StreamMsgs(t, b, wire.StreamCalls) == 0 })
	})

	t.Run("batch publish", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		var out []bus.Outgoing
		for _, id := range []string{"c1", "c2", "c3"} {
			o, err := bus.CallMessage(bustest.SampleCall("run1", id))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, o)
		}
		a, err := bus.ApprovalMessage(bustest.SampleApproval("run1", "c4"))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
		if err := b.PublishBatch(bustest.Context(t), out); err != nil {
			t.Fatal(err)
		}
		// Again: every message is a duplicate, nothing is added.
		if err := b.PublishBatch(bustest.Context(t), out); err != nil {
			t.Fatal(err)
		}
		if n := bustest.StreamMsgs(t, b, wire.StreamCalls); n != 3 {
			t.Errorf("calls: %d messages, want 3", n)
		}
		if n := bustest.StreamMsgs(t, b, wire.StreamApprovals); n != 1 {
			t.Errorf("approvals: %d messages, want 1", n)
		}
		// A message nobody captures fails alone, naming its index.
		out = append(out, bus.Outgoing{Subject: "nowhere.at.all", MsgID: "x", Value: bustest.SampleReply("run1", "c1")})
		err = b.PublishBatch(bustest.Context(t), out)
		if !errors.Is(err, bus.ErrNotCaptured) || !strings.Contains(err.Error(), "[4]") {
			t.Errorf("batch error = %v, want ErrNotCaptured for [4]", err)
		}
	})

	t.Run("publish to an uncaptured subject is an error", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		_, err := b.Publish(bustest.Context(t), "toolgate.nothing.here", "id1", bustest.SampleReply("run1", "c1"))
		if !errors.Is(err, bus.ErrNotCaptured) {
			t.Errorf("err = %v, want ErrNotCaptured", err)
		}
	})

	t.Run("concurrency runs handlers in parallel", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		cfg := fast
		cfg.Concurrency = 2
		arrived := make(chan string, 2)
		release := make(chan struct{})
		consumeCalls(t, b, "weather", cfg,
			func(_ context.Context, d *bus.Delivery[wire.CallRequest]) error {
				arrived <- d.Msg.ToolCallID
				<-release
				return nil
			})
		for _, id := range []string{"c1", "c2"} {
			publishCall(t, b, bustest.SampleCall("run1", id))
		}
		// Both arrive while neither handler has returned.
		got := map[string]bool{bustest.Recv(t, arrived, "first call"): true, bustest.Recv(t, arrived, "second call"): true}
		close(release)
		if !got["c1"] || !got["c2"] {
			t.Errorf("handled %v", got)
		}
	})

	t.Run("auto in-progress keeps a long call from redelivery", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		cfg := fast
		cfg.AckWait = 500 * time.Millisecond
		cfg.AutoInProgress = true
		deliveries := make(chan uint64, 4)
		consumeCalls(t, b, "weather", cfg,
			func(ctx context.Context, d *bus.Delivery[wire.CallRequest]) error {
				deliveries <- d.NumDelivered
				if d.NumDelivered == 1 {
					// Outlive AckWait three times over.
					select {
					case <-time.After(3 * cfg.AckWait):
					case <-ctx.Done():
					}
				}
				return nil
			})
		publishCall(t, b, bustest.SampleCall("run1", "c1"))
		bustest.Recv(t, deliveries, "delivery")
		bustest.WaitFor(t, "acked", func() bool { return bustest.StreamMsgs(t, b, wire.StreamCalls) == 0 })
		select {
		case n := <-deliveries:
			t.Errorf("redelivered (delivery %d) although in progress", n)
		default:
		}
	})

	t.Run("stop waits for a running handler", func(t *testing.T) {
		t.Parallel()
		b := newBus(t)
		started := make(chan struct{})
		release := make(chan struct{})
		var finished atomic.Bool
		s, err := b.ConsumeCalls(bustest.Context(t), "weather", fast, bus.HandlerFunc[wire.CallRequest](
			func(context.Context, *bus.Delivery[wire.CallRequest]) error {
				close(started)
				<-release
				finished.Store(true)
				return nil
			}))
		if err != nil {
			t.Fatal(err)
		}
		publishCall(t, b, bustest.SampleCall("run1", "c1"))
		bustest.Recv(t, started, "handler start")
		stopped := make(chan error, 1)
		go func() { stopped <- s.Stop(bustest.Context(t)) }()
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned %v while the handler ran", err)
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		if err := bustest.Recv(t, stopped, "stop"); err != nil {
			t.Fatal(err)
		}
		if !finished.Load() {
			t.Error("Stop returned before the handler finished")
		}
	})
}

func TestConformanceInProcessMsgpack(t *testing.T) {
	t.Parallel()
	runBusConformance(t, func(t *testing.T) *bus.Bus { return bustest.NewBus(t) })
}

func TestConformanceTCPJSON(t *testing.T) {
	t.Parallel()
	runBusConformance(t, func(t *testing.T) *bus.Bus {
		srv := bustest.NewServer(t)
		b, err := bus.Connect(bustest.Context(t), bus.ConnConfig{URL: srv.ClientURL(), Name: "test", ContentType: wire.ContentTypeJSON, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		bustest.Setup(t, b)
		return b
	})
}
