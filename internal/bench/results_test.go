package bench_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolgate/toolgate/internal/bench"
)

func f(v float64) *float64 { return &v }

func TestResultsJSONRoundTrip(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "out", "results.json")
	got, err := bench.ReadJSON(path)
	if err != nil || got != nil {
		t.Fatalf("ReadJSON of a missing file = %v, %v; want nil, nil", got, err)
	}
	want := &bench.Results{
		Mode:    "quick",
		Started: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC),
		Window:  100, Calls: 2000, Warmup: 200,
		Cases: []bench.Row{
			{Name: "roundtrip/workers=1/batch=1", Metric: bench.MetricThroughput, Workers: 1, Batch: 1,
				Raw: f(4000), Toolgate: f(2500), Ratio: f(0.625), Floor: f(40000), Target: "ratio >= 0.5"},
			{Name: "paused/conversations=10", Metric: bench.MetricHeapPerConversation, Batch: 1},
		},
		Errors: map[string]string{"toolgate": "down"},
	}
	if err := bench.WriteJSON(path, want); err != nil {
		t.Fatal(err)
	}
	got, err = bench.ReadJSON(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}

	// The issue fixes the case shape: these keys, nulls for what was not
	// measured.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Cases []map[string]any `json:"cases"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "metric", "workers", "batch", "raw", "toolgate", "ratio"} {
		for i, c := range raw.Cases {
			if _, ok := c[k]; !ok {
				t.Errorf("case %d lacks %q: %v", i, k, c)
			}
		}
	}
	if c := raw.Cases[1]; c["raw"] != nil || c["toolgate"] != nil || c["ratio"] != nil {
		t.Errorf("unmeasured case = %v, want null raw, toolgate and ratio", c)
	}
}

func TestRowGoals(t *testing.T) {
	t.Parallel()
	pass, fail := true, false
	tests := []struct {
		name      string
		metric    string
		raw, tg   *float64
		storage   *float64
		wantRatio *float64
		wantPass  *bool
	}{
		{"throughput at 0.7 of the storage floor", bench.MetricThroughput, f(1000), f(490), f(700), f(0.49), &pass},
		{"throughput below 0.7 of the storage floor", bench.MetricThroughput, f(1000), f(480), f(700), f(0.48), &fail},
		{"throughput without a storage floor has no goal", bench.MetricThroughput, f(1000), f(100), nil, f(0.1), nil},
		{"p50 three times", bench.MetricP50, f(2), f(6), nil, f(3), &pass},
		{"p99 over three times", bench.MetricP99, f(2), f(6.5), nil, f(3.25), &fail},
		{"resume against raw has no goal", bench.MetricResumeSeconds, f(1), f(8), nil, f(8), nil},
		{"cold resume at half the in-cache rate", bench.MetricColdOverInCache, nil, f(0.5), nil, nil, &pass},
		{"cold resume below half", bench.MetricColdOverInCache, nil, f(0.49), nil, nil, &fail},
		{"three replicas at 1.15", bench.MetricCPUOverOneReplica, nil, f(1.15), nil, nil, &pass},
		{"three replicas over 1.15", bench.MetricCPUOverOneReplica, nil, f(1.2), nil, nil, &fail},
		{"heap is absolute", bench.MetricHeapPerConversation, nil, f(4096), nil, nil, &pass},
		{"heap over", bench.MetricHeapPerConversation, nil, f(4097), nil, nil, &fail},
		{"heap over raw", bench.MetricHeapPerConversation, f(1000), f(5000), nil, f(5), &pass},
		{"heap too far over raw", bench.MetricHeapPerConversation, f(1000), f(5097), nil, f(5.097), &fail},
		{"toolgate not measured", bench.MetricThroughput, f(1000), nil, f(700), nil, nil},
		{"raw zero", bench.MetricP50, f(0), f(1), nil, nil, nil},
		{"no goal", bench.MetricCodecNsPerOp, f(200), f(100), nil, f(0.5), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &bench.Results{Cases: []bench.Row{{Name: "x", Metric: tt.metric, Raw: tt.raw, Toolgate: tt.tg, Storage: tt.storage}}}
			bench.FinishRows(r)
			row := r.Cases[0]
			if diff := cmp.Diff(tt.wantRatio, row.Ratio); diff != "" {
				t.Errorf("ratio (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantPass, row.Pass); diff != "" {
				t.Errorf("pass (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	row := func(metric string, raw, tg *float64) bench.Row {
		return bench.Row{Name: "roundtrip/workers=1/batch=1", Metric: metric, Workers: 1, Batch: 1, Raw: raw, Toolgate: tg}
	}
	tests := []struct {
		name      string
		prev, cur bench.Row
		want      []string // side:metric
	}{
		{"throughput 20 % lower", row(bench.MetricThroughput, f(1000), f(500)), row(bench.MetricThroughput, f(1000), f(400)), []string{"toolgate:" + bench.MetricThroughput}},
		{"throughput 5 % lower", row(bench.MetricThroughput, f(1000), f(500)), row(bench.MetricThroughput, f(950), f(475)), nil},
		{"throughput higher", row(bench.MetricThroughput, f(1000), f(500)), row(bench.MetricThroughput, f(2000), f(900)), nil},
		{"p99 15 % higher on both sides", row(bench.MetricP99, f(10), f(20)), row(bench.MetricP99, f(11.5), f(23)), []string{"raw:" + bench.MetricP99, "toolgate:" + bench.MetricP99}},
		{"p99 exactly 10 % higher", row(bench.MetricP99, f(10), nil), row(bench.MetricP99, f(11), nil), nil},
		{"p50 lower", row(bench.MetricP50, f(10), f(20)), row(bench.MetricP50, f(5), f(10)), nil},
		{"toolgate newly measured", row(bench.MetricP50, f(10), nil), row(bench.MetricP50, f(10), f(1000)), nil},
		{"previous zero", row(bench.MetricP50, f(0), nil), row(bench.MetricP50, f(10), nil), nil},
		{"other case", row(bench.MetricP50, f(10), nil), bench.Row{Name: "other", Metric: bench.MetricP50, Raw: f(100)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			regs := bench.Compare(&bench.Results{Cases: []bench.Row{tt.prev}}, &bench.Results{Cases: []bench.Row{tt.cur}}, bench.RegressionThreshold)
			var got []string
			for _, r := range regs {
				got = append(got, r.Side+":"+r.Metric)
				if r.Worse <= bench.RegressionThreshold {
					t.Errorf("%s flagged with worse = %f", r, r.Worse)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("regressions (-want +got):\n%s", diff)
			}
		})
	}
	if got := bench.Compare(nil, &bench.Results{}, 0.1); got != nil {
		t.Errorf("Compare without previous results = %v, want nil", got)
	}
}

func TestMarkdown(t *testing.T) {
	t.Parallel()
	r := &bench.Results{
		Mode: "full",
		Cases: []bench.Row{
			{Name: "roundtrip/workers=1/batch=1", Metric: bench.MetricP99, Workers: 1, Batch: 1, Raw: f(0.25), Toolgate: f(1), Storage: f(0.5)},
			{Name: "codec/Event/encode", Metric: bench.MetricCodecNsPerOp, Raw: f(2000), Toolgate: f(1500)},
		},
		Regressions: []bench.Regression{{Name: "roundtrip/workers=1/batch=1", Metric: bench.MetricP99, Side: "toolgate", Previous: 0.5, Current: 1, Worse: 1}},
		Previous:    "results.json (earlier)",
		Errors:      map[string]string{"toolgate": "toolgate target: orchestrator not available"},
	}
	bench.FinishRows(r)
	var b strings.Builder
	if err := bench.WriteMarkdown(&b, r); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"## Round trip", "## Codec",
		"| roundtrip/workers=1/batch=1 | p99_ms | 1 | 1 | 0.25 | 1.00 | 4.00 | — | 0.5 | ratio <= 3 | **FAIL** |",
		"| codec/Event/encode | codec_ns_per_op | 0 | 0 | 2000 | 1500 | 0.75 | — | — | — | — |",
		"toolgate: toolgate target: orchestrator not available",
		"roundtrip/workers=1/batch=1 p99_ms (toolgate): 0.5 -> 1.00, 100 % worse",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if lines := strings.Split(md, "\n"); !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| name |") }) {
		t.Errorf("markdown has no table header:\n%s", md)
	}
}

func TestToolgateOnlyGoals(t *testing.T) {
	t.Parallel()
	pass, fail := true, false
	for _, tt := range []struct {
		metric   string
		tg       *float64
		target   string
		wantPass *bool
	}{
		{bench.MetricStoredMessages, f(6), "toolgate <= 6", &pass},
		{bench.MetricStoredMessages, f(11), "toolgate <= 6", &fail},
		{bench.MetricRoundTrips, f(5), "toolgate <= 3", &fail},
		{bench.MetricTimeGrowth, f(1.15), "toolgate <= 1.2", &pass},
		{bench.MetricHistoryBytes, f(5 << 20), "toolgate >= 5242880", &pass},
		{bench.MetricHistoryBytes, f(1 << 20), "toolgate >= 5242880", &fail},
		{bench.MetricReconcileGrowth, nil, "toolgate <= 1.5", nil},
	} {
		r := &bench.Results{Cases: []bench.Row{{Name: "x", Metric: tt.metric, Toolgate: tt.tg}}}
		bench.FinishRows(r)
		row := r.Cases[0]
		if row.Target != tt.target || !cmp.Equal(row.Pass, tt.wantPass) {
			t.Errorf("%s = %v: target %q pass %v, want %q %v", tt.metric, tt.tg, row.Target, row.Pass, tt.target, tt.wantPass)
		}
	}
}

// A heap figure that is not positive, or well below the side's own share,
// is measured again.
func TestMemoryMeasurementImplausible(t *testing.T) {
	for _, tc := range []struct {
		name    string
		figures map[string]float64
		want    bool
	}{
		{"no heap measured", map[string]float64{bench.MetricResumeSeconds: 1}, false},
		{"raw", map[string]float64{bench.MetricHeapPerConversation: 300}, false},
		{"negative", map[string]float64{bench.MetricHeapPerConversation: -1347, bench.MetricOrchestratorHeap: 2033}, true},
		{"zero", map[string]float64{bench.MetricHeapPerConversation: 0}, true},
		{"above its own share", map[string]float64{bench.MetricHeapPerConversation: 2900, bench.MetricOrchestratorHeap: 2000}, false},
		{"within the sampling's error", map[string]float64{bench.MetricHeapPerConversation: 1600, bench.MetricOrchestratorHeap: 2000}, false},
		{"far below its own share", map[string]float64{bench.MetricHeapPerConversation: 1000, bench.MetricOrchestratorHeap: 2000}, true},
	} {
		got := bench.MemoryMeasurement{Conversations: 10, Figures: tc.figures}.Implausible()
		if (got != "") != tc.want {
			t.Errorf("%s: Implausible() = %q, want implausible %v", tc.name, got, tc.want)
		}
	}
}

// A memory case is measured again when its heap figure cannot be, or when
// its resume stalled: a second or more in which no conversation finished
// resuming (a raw resume once took 33 s instead of 3 and read as toolgate
// passing).
func TestMemoryMeasurementDistorted(t *testing.T) {
	heap := map[string]float64{bench.MetricHeapPerConversation: 300, bench.MetricResumeSeconds: 3}
	for _, tc := range []struct {
		name    string
		figures map[string]float64
		gap     time.Duration
		want    string
	}{
		{"steady", heap, 40 * time.Millisecond, ""},
		{"just under a second", heap, bench.StallGap - time.Millisecond, ""},
		{"a second without a resume", heap, bench.StallGap, "no batch completed for 1.0 s"},
		{"heap not positive", map[string]float64{bench.MetricHeapPerConversation: 0}, 0, "heap per conversation 0 B, not positive"},
	} {
		m := bench.MemoryMeasurement{Conversations: 10, Figures: tc.figures, ResumeGap: tc.gap}
		if got := m.Distorted(); got != tc.want {
			t.Errorf("%s: Distorted() = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The headline tells what the storage floor (and the storage floor with
// the look-up) leaves of raw's batch-1 throughput and resume, and what
// toolgate reaches of it.
func TestHeadlineStorageFloor(t *testing.T) {
	t.Parallel()
	r := &bench.Results{Cases: []bench.Row{
		{Name: "roundtrip/workers=2/batch=1", Metric: bench.MetricThroughput, Workers: 2, Batch: 1, Raw: f(10000), Toolgate: f(3000), Storage: f(6000), StorageLookup: f(5000)},
		{Name: "roundtrip/workers=2/batch=10", Metric: bench.MetricThroughput, Workers: 2, Batch: 10, Raw: f(10000), Toolgate: f(5000)},
		{Name: "paused/1000", Metric: bench.MetricResumeSeconds, Batch: 1, Raw: f(1), Toolgate: f(4), Storage: f(2)},
	}}
	bench.FinishRows(r)
	var b strings.Builder
	bench.Headline(&b, r)
	want := "roundtrip/workers=2/batch=1      storage floor 6000 calls/s = 0.6 x raw; toolgate = 0.5 x the storage floor\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("headline lacks %q:\n%s", want, b.String())
	}
	want = "paused/1000                      storage floor of the resume 2.00 s = 2.00 x raw; toolgate = 2.00 x the storage floor\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("headline lacks %q:\n%s", want, b.String())
	}
	want = "roundtrip/workers=2/batch=1      storage floor with the look-up 5000 calls/s = 0.5 x raw; toolgate = 0.6 x the floor with the look-up\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("headline lacks %q:\n%s", want, b.String())
	}
	// The goal's row shows the ratio its target reads: toolgate over its
	// storage floor, not over raw.
	want = "roundtrip/workers=2/batch=1      throughput_calls_per_s              10000         3000      0.5  toolgate / storage floor >= 0.7: FAIL\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("headline's goal row lacks %q:\n%s", want, b.String())
	}
	if n := strings.Count(b.String(), "x the storage floor"); n != 2 {
		t.Errorf("%d storage floor lines, want 2 (batch 10 has none):\n%s", n, b.String())
	}
}
