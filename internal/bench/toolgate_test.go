package bench_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bench"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
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
		// Each call stores its request and its reply, and each conversation
		// (Batch calls) at least one record: per call, a record's share
		// (2/3 of one at batch 3, where a conversation's start and its
		// pause are one record, and its claim and end another). Compared
		// per conversation, in whole messages, not as a sum of fractions.
		perConv := func(stream string) float64 { return math.Round(m.Stored[stream] * float64(c.Batch)) }
		if m.Stored[wire.StreamCalls] < 1 || m.Stored[wire.StreamReplies] < 1 || perConv(bus.StreamConversations) < 1 {
			t.Errorf("%s: stored per call %v", c.Name(), m.Stored)
		}
		// At least the start's append (with the pause, or before it) per
		// conversation.
		if m.RoundTrips < 1 {
			t.Errorf("%s: %f round trips per conversation", c.Name(), m.RoundTrips)
		}
		if m.Gap <= 0 || m.Gap > m.Elapsed {
			t.Errorf("%s: longest gap %s, elapsed %s", c.Name(), m.Gap, m.Elapsed)
		}
	}

	mm, err := target.RunMemory(ctx, bench.MemoryCase{Conversations: 40})
	if err != nil {
		t.Fatal(err)
	}
	for _, metric := range []string{bench.MetricHeapPerConversation, bench.MetricStorePerConversation, bench.MetricResumeSeconds,
		bench.MetricReconcileNone, bench.MetricReconcileFinished, bench.MetricReconcileCleanup, bench.MetricReconcileCleanupEntries} {
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

	lm, err := target.RunLong(ctx, bench.LongCase{Calls: 8})
	if err != nil {
		t.Fatal(err)
	}
	for _, metric := range []string{bench.MetricBytesFirst, bench.MetricBytesLast, bench.MetricTimeFirst, bench.MetricTimeLast, bench.MetricStateBytes} {
		if got := lm.Figures[metric]; got <= 0 {
			t.Errorf("long %s = %f, want positive", metric, got)
		}
	}
	large := bench.LargeCase(300<<10, 100<<10)
	lm, err = target.RunLong(ctx, large)
	if err != nil {
		t.Fatal(err)
	}
	if got := lm.Figures[bench.MetricHistoryBytes]; got < 300<<10 {
		t.Errorf("large history = %f bytes, want at least %d", got, 300<<10)
	}
	// Every result is written at least once.
	if got := lm.Figures[bench.MetricStateBytes]; got < float64(large.Calls*large.ResultBytes) {
		t.Errorf("large conversation wrote %f bytes, want at least its results' %d", got, large.Calls*large.ResultBytes)
	}
}
