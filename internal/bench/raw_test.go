package bench_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bench"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

func newEnv(t *testing.T) *bench.Env {
	t.Helper()
	// Warnings into the test's log: the server answers a stream it could
	// not create with "error creating store for stream" and logs only
	// there why.
	env, err := bench.NewEnv(bench.EnvConfig{StoreDir: t.TempDir(), Logger: bustest.LevelLogger(t, slog.LevelWarn)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env
}

func TestTargetsRoundTrip(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	tests := []struct {
		name   string
		target bench.Target
		c      bench.Case
	}{
		{"raw batch 1", bench.NewRawTarget(env), bench.Case{Workers: 2, Batch: 1, Window: 4, Calls: 40, Warmup: 4}},
		{"raw batch 7", bench.NewRawTarget(env), bench.Case{Workers: 3, Batch: 7, Window: 14, Calls: 50, Warmup: 0}},
		{"core nats batch 5", bench.NewFloorTarget(env), bench.Case{Workers: 2, Batch: 5, Window: 10, Calls: 40, Warmup: 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			m, err := tt.target.Run(ctx, tt.c)
			if err != nil {
				t.Fatal(err)
			}
			wantCalls := tt.c.Batches() * tt.c.Batch
			if m.Calls != wantCalls || m.Latency.Count != wantCalls || m.Reply.Count != wantCalls {
				t.Errorf("calls = %d, latencies = %d, replies = %d, want %d each",
					m.Calls, m.Latency.Count, m.Reply.Count, wantCalls)
			}
			if m.Elapsed <= 0 || m.Throughput() <= 0 {
				t.Errorf("elapsed = %s, throughput = %f, want positive", m.Elapsed, m.Throughput())
			}
			if m.Latency.P50 <= 0 || m.Latency.P50 > m.Latency.P99 || m.Latency.P99 > m.Latency.Max {
				t.Errorf("latency p50 %s, p99 %s, max %s: want 0 < p50 <= p99 <= max",
					m.Latency.P50, m.Latency.P99, m.Latency.Max)
			}
			// A call's batch completes no earlier than its own reply arrives.
			if m.Reply.P50 > m.Latency.P50 || m.Reply.Max > m.Latency.Max {
				t.Errorf("reply latency %+v exceeds batch latency %+v", m.Reply, m.Latency)
			}
			if m.Latency.Max > m.Elapsed {
				t.Errorf("max latency %s exceeds elapsed %s", m.Latency.Max, m.Elapsed)
			}
		})
	}
}

func TestRawMemory(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	target := bench.NewRawMemoryTarget(env)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for range 2 { // a second run must find the bucket and stream cleaned up
		mm, err := target.RunMemory(ctx, bench.MemoryCase{Conversations: 500})
		if err != nil {
			t.Fatal(err)
		}
		if mm.Conversations != 500 {
			t.Errorf("conversations = %d, want 500", mm.Conversations)
		}
		// An entry holds at least its encoded record (several hundred bytes).
		if got := mm.Figures[bench.MetricStorePerConversation]; got < 300 || got > 8192 {
			t.Errorf("store bytes per conversation = %f, want a few hundred to a few thousand", got)
		}
		for _, m := range []string{bench.MetricResumeSeconds, bench.MetricKVCreateSeconds, bench.MetricReplyPublishSeconds} {
			if got := mm.Figures[m]; got <= 0 {
				t.Errorf("%s = %f, want positive", m, got)
			}
		}
		if _, ok := mm.Figures[bench.MetricHeapPerConversation]; !ok {
			t.Errorf("raw side reports no heap figure")
		}
	}
}
