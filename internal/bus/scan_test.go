package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/wire"
)

// A scan of the events while conversations' events are purged (a delete,
// retention) ends each time, in order, and leaves no consumer: an ordered
// consumer ended only on the message it counted last when it began, and
// waited for ever for one purged meanwhile.
func TestScanStreamWhileLogsArePurged(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	b := bustest.NewBus(t)
	const convs, perConv = 300, 4
	var msgs []bus.Outgoing
	for c := range convs {
		for range perConv {
			m, err := bus.EventMessage(batchOf(fmt.Sprintf("conv%d", c), 1)[0], "")
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m)
		}
	}
	if err := b.PublishBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	purged := make(chan struct{})
	go func() {
		defer close(purged)
		for c := range convs {
			subj, _ := wire.EventSubject(fmt.Sprintf("conv%d", c))
			if err := b.PurgeLog(ctx, wire.StreamEvents, subj, 0); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for scans := 0; ; scans++ {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var n int
		var prev uint64
		err := b.ScanStream(sctx, wire.StreamEvents, wire.AllEvents, false, func(_ jetstream.Msg, meta *jetstream.MsgMetadata) {
			if meta.Sequence.Stream <= prev {
				t.Errorf("scan %d: sequence %d after %d", scans, meta.Sequence.Stream, prev)
			}
			prev = meta.Sequence.Stream
			n++
		})
		cancel()
		if err != nil {
			t.Fatalf("scan %d while purging: %v", scans, err)
		}
		if n > convs*perConv {
			t.Fatalf("scan %d read %d messages of %d", scans, n, convs*perConv)
		}
		select {
		case <-purged:
			if n := bustest.Consumers(t, b, wire.StreamEvents); n != 0 {
				t.Errorf("%d consumers left behind", n)
			}
			return
		default:
		}
	}
}

// An approver's scans: of the events, whose consumers it deletes, and of
// the approvals, whose consumers it may not delete (they expire); neither
// reads what came after it began.
func TestScanStreamAsApprover(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, embedded.ServerConfig{Users: roleUsers(t)})
	conn := func(role string) *bus.Bus { return roleConn(t, srv, role) }
	orch := conn(bus.RoleOrchestrator)
	bustest.Setup(t, orch)
	approver := conn(bus.RoleApprover)
	ctx := bustest.Context(t)
	for i := range 3 {
		if _, err := orch.PublishApproval(ctx, bustest.SampleApproval("run1", fmt.Sprintf("c%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	ev, err := bus.EventBatchMessage(batchOf("conv1", 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := orch.PublishBatch(ctx, []bus.Outgoing{ev}); err != nil {
		t.Fatal(err)
	}
	count := func(stream, filter string, keep bool, during func()) int {
		t.Helper()
		n := 0
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := approver.ScanStream(sctx, stream, filter, keep, func(jetstream.Msg, *jetstream.MsgMetadata) {
			if n++; n == 1 && during != nil {
				during()
			}
		}); err != nil {
			t.Fatalf("approver scanning %s: %v", stream, err)
		}
		return n
	}
	later := func() {
		if _, err := orch.PublishApproval(ctx, bustest.SampleApproval("run1", "late")); err != nil {
			t.Error(err)
		}
	}
	if n := count(wire.StreamApprovals, wire.AllApprovals, true, later); n != 3 {
		t.Errorf("scanned %d approval requests, want the 3 there when the scan began", n)
	}
	if n := count(wire.StreamEvents, wire.AllEvents, false, nil); n != 1 {
		t.Errorf("scanned %d event messages, want 1", n)
	}
	if n := bustest.Consumers(t, orch, wire.StreamEvents); n != 0 {
		t.Errorf("%d consumers of the events left behind", n)
	}
}
