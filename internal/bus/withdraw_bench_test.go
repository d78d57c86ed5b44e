package bus_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// BenchmarkCallQueued is the look-up a worker makes of each call before
// running it, of calls still queued: its time, and the CPU time of the
// whole process (client and embedded server) per look-up.
func BenchmarkCallQueued(b *testing.B) {
	bs := bustest.NewBus(b)
	ctx := bustest.Context(b)
	const calls = 2000
	seqs := make([]uint64, calls)
	for i := range seqs {
		ack, err := bs.PublishCall(ctx, bustest.SampleCall("run-bench", fmt.Sprintf("call_%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		seqs[i] = ack.Sequence
	}
	cpu0 := processCPU(b)
	n := 0
	for b.Loop() {
		if queued, err := bs.CallQueued(ctx, seqs[n%calls]); err != nil || !queued {
			b.Fatalf("call %d: queued %v, %v", seqs[n%calls], queued, err)
		}
		n++
	}
	b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(n), "cpu-µs/op")
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
