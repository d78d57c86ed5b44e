package bench

import (
	"runtime/metrics"
	"syscall"
	"time"
)

// allocSample is the runtime's count of the bytes the process ever
// allocated on the heap, read without stopping the world.
const allocSample = "/gc/heap/allocs:bytes"

// allocated is the bytes the whole process allocated so far: the side
// measured, the embedded server and the harness alike, as for both sides;
// its growth over a case is the garbage the collector pays for, a figure
// the machine's speed does not move.
func allocated() uint64 {
	s := []metrics.Sample{{Name: allocSample}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// cpuUsed is the CPU time (user and system) the process has used so far.
func cpuUsed() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuPer is the CPU time used since from, per n, in milliseconds.
func cpuPer(from time.Duration, n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64((cpuUsed() - from).Microseconds()) / 1000 / float64(n)
}

// allocatedPer is what the process allocated since from, per n.
func allocatedPer(from uint64, n int) float64 {
	if n <= 0 {
		return 0
	}
	return float64(allocated()-from) / float64(n)
}
