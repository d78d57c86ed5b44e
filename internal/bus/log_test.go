package bus_test

import (
	"fmt"
	"testing"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// ReadLog reads a subject's messages in order, across several batches,
// from any sequence, leaving other subjects' messages out; an empty or
// unknown subject reads nothing.
func TestReadLog(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	ctx := bustest.Context(t)
	mine, other := bus.ConversationSubject("cmine"), bus.ConversationSubject("cother")
	var seqs []uint64
	for i := range 150 {
		ack, err := b.JetStream().Publish(ctx, mine, fmt.Appendf(nil, "%d", i))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
		if _, err := b.JetStream().Publish(ctx, other, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, from := range []int{0, 1, 63, 64, 149, 150} {
		after := uint64(0)
		if from > 0 {
			after = seqs[from-1]
		}
		var got []string
		last, err := b.ReadLog(ctx, bus.StreamConversations, mine, after, func(m bus.LogMsg) error {
			got = append(got, string(m.Data))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 150-from {
			t.Fatalf("after message %d: read %d messages, want %d", from, len(got), 150-from)
		}
		for i, d := range got {
			if d != fmt.Sprint(from+i) {
				t.Fatalf("after message %d: message %d is %q", from, i, d)
			}
		}
		if want := seqs[len(seqs)-1]; from < 150 && last != want || from == 150 && last != after {
			t.Errorf("after message %d: last sequence %d", from, last)
		}
	}
	last, err := b.ReadLog(ctx, bus.StreamConversations, bus.ConversationSubject("cnone"), 0, func(bus.LogMsg) error {
		t.Error("read a message of an empty subject")
		return nil
	})
	if err != nil || last != 0 {
		t.Errorf("empty subject: last %d, %v", last, err)
	}
}
