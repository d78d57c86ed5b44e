package bench_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolgate/toolgate/internal/bench"
)

func durations(ns ...int) []time.Duration {
	out := make([]time.Duration, len(ns))
	for i, n := range ns {
		out[i] = time.Duration(n)
	}
	return out
}

func oneTo(n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i + 1)
	}
	return out
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single p50", durations(7), 50, 7},
		{"single p99", durations(7), 99, 7},
		{"p50 of 1..100", oneTo(100), 50, 50},
		{"p99 of 1..100", oneTo(100), 99, 99},
		{"p100 of 1..100", oneTo(100), 100, 100},
		{"p99 of 1..10 is the maximum", oneTo(10), 99, 10},
		{"p50 of 1..10", oneTo(10), 50, 5},
		{"p50 of 1..11 rounds the rank up", oneTo(11), 50, 6},
		{"p99 of 1..1000", oneTo(1000), 99, 990},
		{"p99.9 of 1..1000", oneTo(1000), 99.9, 999},
		{"p0 is the minimum", oneTo(10), 0, 1},
		{"negative is the minimum", oneTo(10), -5, 1},
		{"above 100 is the maximum", oneTo(10), 150, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := bench.Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(%d values, %g) = %d, want %d", len(tt.sorted), tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []time.Duration
		want bench.Summary
	}{
		{"empty", nil, bench.Summary{}},
		{"unsorted input", durations(30, 10, 20, 40), bench.Summary{Count: 4, Mean: 25, P50: 20, P99: 40, Max: 40}},
		{"1..100", oneTo(100), bench.Summary{Count: 100, Mean: 50, P50: 50, P99: 99, Max: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, bench.Summarize(tt.in)); diff != "" {
				t.Errorf("Summarize (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCaseShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		c                                 bench.Case
		conversations, batches, warmBatch int
	}{
		{bench.Case{Workers: 1, Batch: 1, Window: 100, Calls: 2000, Warmup: 200}, 100, 2000, 200},
		{bench.Case{Workers: 4, Batch: 10, Window: 100, Calls: 2000, Warmup: 200}, 10, 200, 20},
		{bench.Case{Workers: 8, Batch: 100, Window: 100, Calls: 2050, Warmup: 1}, 1, 21, 1},
		{bench.Case{Workers: 8, Batch: 100, Window: 10, Calls: 100, Warmup: 0}, 1, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.c.Name(), func(t *testing.T) {
			t.Parallel()
			got := []int{tt.c.Conversations(), tt.c.Batches(), tt.c.WarmupBatches()}
			if diff := cmp.Diff([]int{tt.conversations, tt.batches, tt.warmBatch}, got); diff != "" {
				t.Errorf("conversations, batches, warm-up batches (-want +got):\n%s", diff)
			}
		})
	}
	m := bench.Matrix([]int{1, 2}, []int{1, 10}, 100, 10, 0)
	var names []string
	for _, c := range m {
		names = append(names, c.Name())
	}
	want := []string{"roundtrip/workers=1/batch=1", "roundtrip/workers=2/batch=1",
		"roundtrip/workers=1/batch=10", "roundtrip/workers=2/batch=10"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("Matrix (-want +got):\n%s", diff)
	}
}
