package bench_test

import (
	"context"
	"log/slog"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
		{"storage floor", bench.NewStorageTarget(env, bench.StorageSizes{Record: 1500, Event: 5000}), bench.Case{Workers: 2, Batch: 1, Window: 6, Calls: 40, Warmup: 4}},
		{"storage floor with the look-up", bench.NewStorageLookupTarget(env, bench.StorageSizes{Record: 1500, Event: 5000}), bench.Case{Workers: 2, Batch: 1, Window: 6, Calls: 40, Warmup: 4}},
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

// The storage floor stores, beside raw's call and reply, two records in a
// log and an event message per call, at the sizes it is given as the
// streams count them; and it refuses a batch it cannot store as toolgate.
func TestStorageFloorStoresToolgatesMessages(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	sizes := bench.StorageSizes{Record: 1200, Event: 6000}
	target := bench.NewStorageTarget(env, sizes)
	if target.Name() != "storage" {
		t.Errorf("name %q, want storage", target.Name())
	}
	m, err := target.Run(ctx, bench.Case{Workers: 1, Batch: 1, Window: 3, Calls: 30, Warmup: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"BENCH_CALLS": 1, "BENCH_REPLIES": 1, "BENCH_LOG": 2, "BENCH_EVENTS": 1}
	got := map[string]float64{}
	for name, n := range m.Stored {
		got[name[:strings.LastIndex(name, "_")]] += n
	}
	if !maps.Equal(got, want) {
		t.Errorf("stored per call %v, want %v", m.Stored, want)
	}
	for name, n := range m.StoredBytes {
		var per float64
		switch {
		case strings.HasPrefix(name, "BENCH_LOG"):
			per = n / 2 / float64(sizes.Record)
		case strings.HasPrefix(name, "BENCH_EVENTS"):
			per = n / float64(sizes.Event)
		default:
			continue
		}
		// Within the bytes of a header value whose length varies.
		if per < 0.98 || per > 1.02 {
			t.Errorf("%s stored %.0f B per call, %.3f of the size given", name, n, per)
		}
	}
	if _, err := target.Run(ctx, bench.Case{Workers: 1, Batch: 2, Window: 2, Calls: 4}); err == nil {
		t.Error("a batch of 2 measured; want it refused")
	}
}

// The storage floor with the look-up stores what the storage floor
// stores, and its workers send one get of the calls stream per call,
// before its reply (a direct get, as the calls stream allows them, as
// toolgate's worker's first look); the storage floor sends none.
func TestStorageLookupFloorLooksCallsUp(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	b, err := env.Connect(ctx, "look-up-count")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The server does not count gets among its API requests; a
	// subscriber of their subjects sees each.
	var gets atomic.Int64
	count := func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, "$JS.API.DIRECT.GET.BENCH_CALLS_") || strings.HasPrefix(m.Subject, "$JS.API.STREAM.MSG.GET.BENCH_CALLS_") {
			gets.Add(1)
		}
	}
	for _, subject := range []string{"$JS.API.DIRECT.GET.>", "$JS.API.STREAM.MSG.GET.>"} {
		sub, err := b.Conn().Subscribe(subject, count)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	c := bench.Case{Workers: 1, Batch: 1, Window: 3, Calls: 60, Warmup: 3}
	sizes := bench.StorageSizes{Record: 1200, Event: 6000}
	perRun := map[string]int64{}
	stored := map[string]float64{}
	for _, target := range []*bench.RawTarget{bench.NewStorageTarget(env, sizes), bench.NewStorageLookupTarget(env, sizes)} {
		before := gets.Load()
		m, err := target.Run(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		// The gets of the run reach the subscriber before a request sent
		// after them is answered.
		if err := b.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
		perRun[target.Name()] = gets.Load() - before
		stored[target.Name()] = m.StoredPerCall()
	}
	// Warm-up and measured calls alike are looked up.
	want := map[string]int64{"storage": 0, "storage+lookup": int64(c.Calls + c.WarmupBatches()*c.Batch)}
	if !maps.Equal(perRun, want) {
		t.Errorf("message gets of the calls stream per run %v, want %v", perRun, want)
	}
	if stored["storage"] != stored["storage+lookup"] {
		t.Errorf("stored per call: storage %v, storage+lookup %v; want the same", stored["storage"], stored["storage+lookup"])
	}
}

// Toolgate's stored sizes are the floor's, where it measured them.
func TestStorageSizesOf(t *testing.T) {
	m := &bench.Measurement{
		Stored:      map[string]float64{"TOOLGATE_CONVERSATIONS": 2, "TOOLGATE_EVENTS": 1.25},
		StoredBytes: map[string]float64{"TOOLGATE_CONVERSATIONS": 3000, "TOOLGATE_EVENTS": 5000},
	}
	if got, want := bench.StorageSizesOf(m), (bench.StorageSizes{Record: 1500, Event: 4000}); got != want {
		t.Errorf("sizes %+v, want %+v", got, want)
	}
	if got := bench.StorageSizesOf(nil); got.Record <= 0 || got.Event <= 0 {
		t.Errorf("default sizes %+v, want positive", got)
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
		for _, m := range []string{bench.MetricResumeSeconds, bench.MetricResumeStorageSeconds, bench.MetricKVCreateSeconds, bench.MetricReplyPublishSeconds} {
			if got := mm.Figures[m]; got <= 0 {
				t.Errorf("%s = %f, want positive", m, got)
			}
		}
		if _, ok := mm.Figures[bench.MetricHeapPerConversation]; !ok {
			t.Errorf("raw side reports no heap figure")
		}
	}
}
