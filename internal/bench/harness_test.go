package bench_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bench"
)

// downTarget is a toolgate side that cannot run.
type downTarget struct{}

func (downTarget) Name() string { return "toolgate" }
func (downTarget) Run(context.Context, bench.Case) (bench.Measurement, error) {
	return bench.Measurement{}, bench.ErrOrchestratorUnavailable
}
func (downTarget) RunMemory(context.Context, bench.MemoryCase) (bench.MemoryMeasurement, error) {
	return bench.MemoryMeasurement{}, bench.ErrOrchestratorUnavailable
}
func (downTarget) RunLong(context.Context, bench.LongCase) (bench.LongMeasurement, error) {
	return bench.LongMeasurement{}, bench.ErrOrchestratorUnavailable
}

// toolgateOnly says whether a row has no raw side.
func toolgateOnly(row bench.Row) bool {
	return row.Metric == bench.MetricRoundTrips || row.Metric == bench.MetricResumeReads || row.Metric == bench.MetricResumeWrites || row.Metric == bench.MetricOrchestratorHeap || strings.HasPrefix(row.Name, "long/") ||
		strings.HasPrefix(row.Name, "large/") || strings.HasPrefix(row.Name, "reconcile/")
}

// TestRunSmall runs the whole harness on a tiny matrix, once with the
// toolgate side unavailable and once with the real one, and saves both
// into one folder so that the second is compared with the first.
func TestRunSmall(t *testing.T) {
	env := newEnv(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cfg := bench.Config{
		Quick:   true,
		Workers: []int{1, 2}, Batches: []int{1, 5},
		Window: 5, Calls: 20, Warmup: 5,
		Paused:    []int{100},
		Settle:    -1,
		LongCalls: 6, LargeHistory: 400 << 10,
		CodecTime: time.Millisecond,
		// Their own tests: TestColdResume, TestReplicas.
		ColdResume: -1, Replicas: []int{-1}, LatencyInFlight: []int{-1},
		Env:      env,
		Toolgate: downTarget{}, ToolgateMemory: downTarget{}, ToolgateLong: downTarget{},
	}

	res, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 4 cases × 6 round-trip metrics and a round-trip count for the 2 of
	// batch 1, 8 + 3 long-conversation metrics, 10 memory and 12 reconcile
	// metrics (list and retention ones among them), 5 messages × 2 ops × 3 codec metrics
	// + 5 sizes.
	if want := 4*6 + 2 + 8 + 3 + 10 + 12 + 5*2*3 + 5; len(res.Cases) != want {
		t.Fatalf("got %d rows, want %d", len(res.Cases), want)
	}
	if got := res.Errors["toolgate"]; got != bench.ErrOrchestratorUnavailable.Error() {
		t.Errorf("toolgate error = %q, want %q", got, bench.ErrOrchestratorUnavailable)
	}
	for _, row := range res.Cases {
		if row.Metric == bench.MetricHeapPerConversation || row.Metric == bench.MetricHeapAtPause {
			if row.Raw == nil {
				t.Errorf("raw %s not measured", row.Metric)
			}
			continue // a heap difference may be negative after a GC
		}
		if toolgateOnly(row) {
			if row.Raw != nil || row.Toolgate != nil {
				t.Errorf("%s %s: raw %v toolgate %v, want neither", row.Name, row.Metric, row.Raw, row.Toolgate)
			}
			continue
		}
		if row.Raw == nil || *row.Raw <= 0 {
			t.Errorf("%s %s: raw = %v, want positive", row.Name, row.Metric, row.Raw)
		}
		if strings.HasPrefix(row.Name, "roundtrip/") && row.Metric != bench.MetricStoredMessages && (row.Floor == nil || *row.Floor <= 0) {
			t.Errorf("%s %s: floor = %v, want positive", row.Name, row.Metric, row.Floor)
		}
		// Batch 1's round trips are measured on both storage floors, each
		// run its own (a throughput of two runs is never the same).
		if strings.HasPrefix(row.Name, "roundtrip/") && row.Batch == 1 && row.Metric == bench.MetricThroughput &&
			(row.Storage == nil || row.StorageLookup == nil || *row.Storage <= 0 || *row.StorageLookup <= 0 || *row.Storage == *row.StorageLookup) {
			t.Errorf("%s %s: storage floor %s, with the look-up %s; want each measured by itself", row.Name, row.Metric, fmtOpt(row.Storage), fmtOpt(row.StorageLookup))
		}
		isCodec := strings.HasPrefix(row.Name, "codec/")
		if isCodec != (row.Toolgate != nil) {
			t.Errorf("%s %s: toolgate = %v; want a figure exactly for codec rows", row.Name, row.Metric, row.Toolgate)
		}
	}
	if _, err := bench.Save(dir, res); err != nil {
		t.Fatal(err)
	}
	if res.Previous != "" {
		t.Errorf("first save compared with %q", res.Previous)
	}

	cfg.Toolgate, cfg.ToolgateMemory, cfg.ToolgateLong = nil, nil, nil // the real toolgate side
	cfg.Batches, cfg.Paused, cfg.CodecTime = []int{5}, []int{30}, -1
	res2, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Errors != nil {
		t.Errorf("errors = %v, want none", res2.Errors)
	}
	for _, row := range res2.Cases {
		if !strings.HasPrefix(row.Name, "roundtrip/") {
			if (row.Metric == bench.MetricHeapPerConversation || row.Metric == bench.MetricHeapAtPause || toolgateOnly(row)) && row.Toolgate == nil {
				t.Errorf("%s %s: toolgate not measured", row.Name, row.Metric)
			}
			if row.Metric == bench.MetricHistoryBytes && strings.HasPrefix(row.Name, "large/") && (row.Pass == nil || row.Toolgate == nil || *row.Toolgate < 400<<10) {
				t.Errorf("%s: history of %v bytes, want at least %d", row.Name, row.Toolgate, 400<<10)
			}
			continue
		}
		// Of batch 5, the latencies and stored messages have a target;
		// throughput has one against the storage floor, which batch 1 has
		// alone.
		goal := row.Metric == bench.MetricP50 || row.Metric == bench.MetricP99 || row.Metric == bench.MetricStoredMessages
		if row.Toolgate == nil || row.Ratio == nil || (row.Pass != nil) != goal {
			t.Fatalf("%s %s: toolgate %v ratio %v pass %v, want all set", row.Name, row.Metric, row.Toolgate, row.Ratio, row.Pass)
		}
		if got, want := *row.Ratio, *row.Toolgate / *row.Raw; got != want {
			t.Errorf("%s %s: ratio = %f, want %f", row.Name, row.Metric, got, want)
		}
	}
	if _, err := bench.Save(dir, res2); err != nil {
		t.Fatal(err)
	}
	if res2.Previous == "" {
		t.Error("second save did not compare with the first")
	}
	saved, err := bench.ReadJSON(filepath.Join(dir, bench.FileJSON))
	if err != nil || saved == nil || len(saved.Cases) != len(res2.Cases) {
		t.Fatalf("saved results = %v, %v; want the second run", saved, err)
	}
	png, err := os.ReadFile(filepath.Join(dir, bench.FilePlot))
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("plot is not a PNG (err %v)", err)
	}
	md, err := os.ReadFile(filepath.Join(dir, bench.FileMarkdown))
	if err != nil || !strings.Contains(string(md), "| roundtrip/workers=2/batch=5 | p99_ms |") {
		t.Errorf("results.md lacks the round-trip table (err %v):\n%s", err, md)
	}
	var head strings.Builder
	bench.Headline(&head, res2)
	if !strings.Contains(head.String(), "roundtrip/workers=2/batch=5") || !strings.Contains(head.String(), "regressions") {
		t.Errorf("headline:\n%s", head.String())
	}
}

// fmtOpt is a figure that may not be measured.
func fmtOpt(v *float64) string {
	if v == nil {
		return "none"
	}
	return strconv.FormatFloat(*v, 'g', -1, 64)
}
