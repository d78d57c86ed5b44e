package bench_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bench"
)

func TestToolgateTarget(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	target := bench.NewToolgateTarget(env)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	for _, c := range []bench.Case{
		{Workers: 2, Batch: 1, Window: 4, Calls: 12, Warmup: 2},
		{Workers: 1, Batch: 3, Window: 6, Calls: 12, Warmup: 0},
	} {
		m, err := target.Run(ctx, c)
		if err != nil {
			t.Fatalf("%s: %v", c.Name(), err)
		}
		if want := c.Batches() * c.Batch; m.Calls != want || m.Latency.Count != want {
			t.Errorf("%s: calls %d, latencies %d, want %d", c.Name(), m.Calls, m.Latency.Count, want)
		}
		if m.Latency.P50 <= 0 || m.Latency.P99 < m.Latency.P50 || m.Latency.Max > m.Elapsed {
			t.Errorf("%s: latency %+v, elapsed %s", c.Name(), m.Latency, m.Elapsed)
		}
	}

	mm, err := target.RunMemory(ctx, bench.MemoryCase{Conversations: 40})
	if err != nil {
		t.Fatal(err)
	}
	for _, metric := range []string{bench.MetricHeapPerConversation, bench.MetricStorePerConversation, bench.MetricResumeSeconds} {
		if _, ok := mm.Figures[metric]; !ok {
			t.Errorf("memory figures lack %s: %v", metric, mm.Figures)
		}
	}
	if got := mm.Figures[bench.MetricStorePerConversation]; got < 100 {
		t.Errorf("store bytes per paused conversation = %f, want at least a stored conversation's size", got)
	}
	if got := mm.Figures[bench.MetricResumeSeconds]; got <= 0 {
		t.Errorf("resume seconds = %f, want positive", got)
	}
}
