package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bench"
)

// The cold side's cache holds a quarter of the paused conversations, so
// its resume reads logs where the in-cache side reads none, and bare
// JetStream's reads of the same logs are timed.
func TestColdResume(t *testing.T) {
	env := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const n = 200
	m, err := bench.NewToolgateTarget(env).RunColdResume(ctx, bench.ColdResumeCase{Conversations: n})
	if err != nil {
		t.Fatal(err)
	}
	if m.InCache.Reads > 0.05 || m.Cold.Reads < 0.5 {
		t.Errorf("log reads per conversation: %.2f in cache, %.2f cold; want none and most", m.InCache.Reads, m.Cold.Reads)
	}
	if m.RecordBytes <= 0 || m.CacheBytes <= 0 || m.RawLogReads <= 0 || m.InCache.Elapsed <= 0 || m.Cold.Elapsed <= 0 || m.InCache.CPU <= 0 || m.Cold.CPU <= 0 {
		t.Errorf("measurement %+v: want every figure positive", m)
	}
}
