package bus_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/wire"
)

func batchOf(conv string, n int) []wire.Event {
	events := make([]wire.Event, n)
	for i := range events {
		events[i] = wire.Event{ConversationID: conv, RunID: "run1", Type: fmt.Sprintf("step_%d", i),
			Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), Time: deadline}
	}
	return events
}

// Several events of a conversation stored as one message read back as the
// same events, in order, each with its place in the message, in both
// encodings; a single event is stored as a plain event.
func TestEventBatchRoundTrip(t *testing.T) {
	t.Parallel()
	for _, ct := range []string{wire.ContentTypeMsgpack, wire.ContentTypeJSON} {
		t.Run(ct, func(t *testing.T) {
			t.Parallel()
			srv := bustest.StartServer(t, embedded.ServerConfig{})
			b := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "events", ContentType: ct})
			bustest.Setup(t, b)
			one := batchOf("conv1", 1)
			three := batchOf("conv1", 3)
			var msgs []bus.Outgoing
			for _, events := range [][]wire.Event{one, three} {
				m, err := bus.EventBatchMessage(events)
				if err != nil {
					t.Fatal(err)
				}
				msgs = append(msgs, m)
			}
			if msgs[0].Header.Get(wire.HeaderEventBatch) != "" {
				t.Error("a single event is marked as a batch")
			}
			if got := msgs[1].Header.Get(wire.HeaderEventBatch); got != "3" {
				t.Errorf("%s = %q, want 3", wire.HeaderEventBatch, got)
			}
			if err := b.PublishBatch(ctxT(t), msgs); err != nil {
				t.Fatal(err)
			}
			var got []bus.StoredEvent
			for se, err := range b.Events(ctxT(t), "conv1", 0) {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, se)
				if len(got) == 4 {
					break
				}
			}
			want := append(append([]wire.Event{}, one...), three...)
			for i, se := range got {
				if diff := cmp.Diff(want[i], se.Event); diff != "" {
					t.Errorf("event %d (-want +got):\n%s", i, diff)
				}
			}
			if got[0].Seq == got[1].Seq || got[1].Seq != got[3].Seq || got[1].Index != 0 || got[3].Index != 2 {
				t.Errorf("places: %d.%d %d.%d %d.%d %d.%d", got[0].Seq, got[0].Index, got[1].Seq, got[1].Index,
					got[2].Seq, got[2].Index, got[3].Seq, got[3].Index)
			}
		})
	}
}

// A batch must hold valid events of one conversation, and not too many.
func TestEventBatchRefused(t *testing.T) {
	t.Parallel()
	mixed := append(batchOf("conv1", 2), batchOf("conv2", 1)...)
	bad := batchOf("conv1", 2)
	bad[1].Type = ""
	cases := []struct {
		name   string
		events []wire.Event
		want   string
	}{
		{"empty", nil, "is empty"},
		{"two conversations", mixed, `events[2]: conversation_id "conv2" is not the batch's "conv1"`},
		{"invalid event", bad, "events[1]"},
		{"too many", batchOf("conv1", wire.MaxEventBatch+1), "more than"},
	}
	for _, c := range cases {
		if _, err := bus.EventBatchMessage(c.events); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
		data, err := json.Marshal(wire.EventBatch{Events: c.events})
		if err != nil {
			t.Fatal(err)
		}
		hdr := map[string][]string{wire.HeaderEventBatch: {"1"}, wire.HeaderContentType: {wire.ContentTypeJSON}}
		if _, err := bus.DecodeEvents(data, hdr); err == nil {
			t.Errorf("%s: decoded", c.name)
		}
	}
}

// An encoded batch skips only the scan of its data: bad addressing is
// refused as by EventBatchMessage, while data that is not JSON, which
// encoding/json cannot have produced, is refused only by the full check.
func TestEncodedEventBatchMessage(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3} {
		events := batchOf("conv1", n)
		events[n-1].Data = json.RawMessage(`{not json`)
		if _, err := bus.EventBatchMessage(events); err == nil || !strings.Contains(err.Error(), "data") {
			t.Errorf("%d events, one with bad data: %v, want refused naming data", n, err)
		}
		if _, err := bus.EncodedEventBatchMessage(events); err != nil {
			t.Errorf("%d encoded events: %v", n, err)
		}
		events[n-1].ConversationID = "conv 2"
		if _, err := bus.EncodedEventBatchMessage(events); err == nil || !strings.Contains(err.Error(), "conversation_id") {
			t.Errorf("%d encoded events, one with a bad conversation id: %v, want refused naming it", n, err)
		}
	}
}

// The bytes of a message published are used again for later messages once
// its publication is over: batches published at once from several
// goroutines, of sizes that differ (one past what is kept for reuse), are
// stored each as it was sent.
func TestPublishedBytesReusedOnlyWhenDone(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, embedded.ServerConfig{})
	b := bustest.Connect(t, srv, "events")
	bustest.Setup(t, b)
	const senders, rounds = 4, 25
	want := map[string][]wire.Event{}
	var mu sync.Mutex
	var g errgroup.Group
	for s := range senders {
		g.Go(func() error {
			for r := range rounds {
				var msgs []bus.Outgoing
				var sent []wire.Event
				for c := range 3 {
					conv := fmt.Sprintf("conv-%d-%d-%d", s, r, c)
					events := batchOf(conv, 1+(s+r+c)%5)
					pad := strings.Repeat(string(rune('a'+c)), (s*rounds+r)*17%900)
					if s == 0 && r == rounds/2 && c == 0 {
						pad = strings.Repeat("x", 80<<10)
					}
					for i := range events {
						events[i].Data = json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, pad))
					}
					m, err := bus.EventBatchMessage(events)
					if err != nil {
						return err
					}
					msgs = append(msgs, m)
					sent = append(sent, events...)
				}
				if err := b.PublishBatch(ctxT(t), msgs); err != nil {
					return err
				}
				mu.Lock()
				for _, e := range sent {
					want[e.ConversationID] = append(want[e.ConversationID], e)
				}
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	got := map[string][]wire.Event{}
	n := 0
	for _, events := range want {
		n += len(events)
	}
	for se, err := range b.Events(ctxT(t), "", 0) {
		if err != nil {
			t.Fatal(err)
		}
		got[se.Event.ConversationID] = append(got[se.Event.ConversationID], se.Event)
		if n--; n == 0 {
			break
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stored events (-sent +stored):\n%s", diff)
	}
}
