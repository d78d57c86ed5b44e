package bus_test

import (
	"fmt"
	"testing"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// BenchmarkReadLogFromStart reads logs of two records from their start, as
// the orchestrator reads a conversation its cache does not hold, in a
// store laid out as conversations write it: every log's first record, then
// every log's second, so that each log's two records have the other logs'
// between them.
func BenchmarkReadLogFromStart(b *testing.B) {
	for _, logs := range []int{100, 2000} {
		b.Run(fmt.Sprintf("logs=%d", logs), func(b *testing.B) {
			bs := bustest.NewBus(b)
			ctx := bustest.Context(b)
			record := make([]byte, 1400)
			seqs := make([]uint64, logs)
			for range 2 {
				for i := range logs {
					seq, err := bs.AppendLog(ctx, bus.StreamConversations, bus.ConversationSubject(fmt.Sprintf("c%d", i)), seqs[i], record, nil)
					if err != nil {
						b.Fatal(err)
					}
					seqs[i] = seq
				}
			}
			i := 0
			for b.Loop() {
				n := 0
				if _, err := bs.ReadLog(ctx, bus.StreamConversations, bus.ConversationSubject(fmt.Sprintf("c%d", i%logs)), 0, func(bus.LogMsg) error {
					n++
					return nil
				}); err != nil || n != 2 {
					b.Fatalf("read %d records: %v", n, err)
				}
				i++
			}
		})
	}
}
