package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config configures a harness run. Zero values take the defaults of the
// mode (full or quick).
type Config struct {
	// Quick runs a subset with fewer calls: about six minutes, most of it
	// the replica and cold-resume cases.
	Quick bool
	// Workers and Batches span the round-trip matrix. Default to 1,2,4,8
	// and 1,10,100; quick: 1,4 and 1,10,100.
	Workers []int
	Batches []int
	// Window is the number of calls in flight. Defaults to 100.
	Window int
	// Calls and Warmup per round-trip case. Default to 20000 and 2000;
	// quick: 1000 and 100.
	Calls  int
	Warmup int
	// Paused are the numbers of conversations the memory case holds, one
	// measurement each. Default to 1000, 10000 and 100000; quick: 500 and
	// 2000. A single value below 1 skips the memory case.
	Paused []int
	// Settle is the memory case's wait for the server's caches to expire
	// before each heap measurement (MemoryCase.Settle). Defaults to
	// CacheSettle; negative measures at once.
	Settle time.Duration
	// LongCalls is the number of calls of the long-conversation case.
	// Defaults to 300; quick: 100. Negative skips it.
	LongCalls int
	// LatencyInFlight are the calls in flight of the latency cases: batch
	// 1, latencyWorkers workers, each side's p50 and p99 and what toolgate
	// adds to raw's. Default to 1 and 10. A single value below 1 skips
	// them.
	LatencyInFlight []int
	// ColdResume is the paused conversations of the cold-resume case
	// (ColdResumeCase). Defaults to 20000; quick: 4000. Negative skips it.
	ColdResume int
	// Replicas are the orchestrator counts of the replica case (each a
	// process, sharing one nats-server process); ReplicaInFlight its
	// conversations in flight, ReplicaCalls its measured calls per count.
	// Default to 1,2,3, 10,50 and 5000; quick: 1000 calls. A single
	// value below 1 skips the case. ReplicaCluster runs them again on a
	// three-node NATS cluster.
	Replicas        []int
	ReplicaInFlight []int
	ReplicaCalls    int
	ReplicaCluster  bool
	// NoReplicaFloor skips the replica floor (RunReplicaFloor), which
	// otherwise runs beside the replica case at each of its counts.
	NoReplicaFloor bool
	// ReplicaFloorPartitions is the replica floor's reply partitions
	// (ReplicaFloorRun.Partitions). Defaults to one per process.
	ReplicaFloorPartitions int
	// ReplicaGOMAXPROCS, when positive, is GOMAXPROCS in the replica
	// case's orchestrator processes' environment (not the servers', not
	// the harness's), as a container's CPU limit would set it. Defaults
	// to 0: inherited.
	ReplicaGOMAXPROCS int
	// LargeHistory is the history, in bytes, the large conversation
	// reaches with results of LargeResultBytes. Defaults to 5 MiB.
	// Negative skips it.
	LargeHistory int
	// CodecTime is the duration of each codec benchmark. Defaults to 1s;
	// quick: 50ms. Negative skips the codec case.
	CodecTime time.Duration
	// Env is the server the targets share. nil: a new one on a temporary
	// file store, reached by Transport, closed at the end.
	Env *Env
	// Transport is how the sides connect to a server the run starts
	// (Env nil). Defaults to TransportInProcess.
	Transport Transport
	// Toolgate and ToolgateMemory are the toolgate side. nil: a
	// ToolgateTarget on Env.
	Toolgate       Target
	ToolgateMemory MemoryTarget
	ToolgateLong   LongTarget
	// Progress receives a line per measurement. nil discards.
	Progress io.Writer
	// Note is recorded in the results (see Results.Note).
	Note string
}

func (c Config) withDefaults() Config {
	if len(c.Workers) == 0 {
		c.Workers = []int{1, 2, 4, 8}
		if c.Quick {
			c.Workers = []int{1, 4}
		}
	}
	if len(c.Batches) == 0 {
		c.Batches = []int{1, 10, 100}
	}
	if c.Window <= 0 {
		c.Window = 100
	}
	if c.Calls <= 0 {
		c.Calls = 20000
		if c.Quick {
			c.Calls = 1000
		}
	}
	if c.Warmup <= 0 {
		c.Warmup = c.Calls / 10
	}
	if len(c.Paused) == 0 {
		c.Paused = []int{1000, 10_000, 100_000}
		if c.Quick {
			c.Paused = []int{500, 2000}
		}
	}
	if c.Settle == 0 {
		c.Settle = CacheSettle
	}
	if len(c.Paused) == 1 && c.Paused[0] < 1 {
		c.Paused = nil
	}
	if c.LongCalls == 0 {
		c.LongCalls = 300
		if c.Quick {
			c.LongCalls = 100
		}
	}
	if c.LargeHistory == 0 {
		c.LargeHistory = 5 << 20
	}
	if len(c.LatencyInFlight) == 0 {
		c.LatencyInFlight = []int{1, 10}
	}
	if len(c.LatencyInFlight) == 1 && c.LatencyInFlight[0] < 1 {
		c.LatencyInFlight = nil
	}
	if len(c.Replicas) == 0 {
		c.Replicas = []int{1, 2, 3}
	}
	if len(c.Replicas) == 1 && c.Replicas[0] < 1 {
		c.Replicas = nil
	}
	if len(c.ReplicaInFlight) == 0 {
		c.ReplicaInFlight = []int{10, 50}
	}
	if c.ReplicaCalls <= 0 {
		c.ReplicaCalls = 5000
		if c.Quick {
			c.ReplicaCalls = 1000
		}
	}
	if c.ColdResume == 0 {
		c.ColdResume = 20_000
		if c.Quick {
			c.ColdResume = 4000
		}
	}
	if c.CodecTime == 0 {
		c.CodecTime = time.Second
		if c.Quick {
			c.CodecTime = 50 * time.Millisecond
		}
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// Run measures every case with the baseline, the core NATS floor and the
// toolgate side, one case at a time and the sides back to back, and
// returns the results. A toolgate side that fails is recorded in
// Results.Errors with its figures left null; a baseline that fails ends
// the run.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	cfg = cfg.withDefaults()
	env := cfg.Env
	if env == nil {
		var err error
		if env, err = NewEnv(EnvConfig{Transport: cfg.Transport}); err != nil {
			return nil, err
		}
		defer env.Close()
	}
	if cfg.Toolgate == nil {
		cfg.Toolgate = NewToolgateTarget(env)
	}
	if cfg.ToolgateMemory == nil {
		cfg.ToolgateMemory = NewToolgateTarget(env)
	}
	if cfg.ToolgateLong == nil {
		cfg.ToolgateLong = NewToolgateTarget(env)
	}
	h := &harnessRun{cfg: cfg, env: env, res: newResults(cfg)}
	h.res.Transport = env.Transport()
	if err := h.roundTrips(ctx); err != nil {
		return nil, err
	}
	if cfg.LongCalls > 0 {
		runLong(ctx, h.res, cfg, LongCase{Calls: cfg.LongCalls}, h.toolgateDown, h.toolgateErr)
	}
	if cfg.LargeHistory > 0 {
		runLong(ctx, h.res, cfg, LargeCase(cfg.LargeHistory, LargeResultBytes), h.toolgateDown, h.toolgateErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := h.memory(ctx); err != nil {
		return nil, err
	}
	if len(cfg.Replicas) > 0 && !h.toolgateDown {
		h.replicaCases(ctx)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	if cfg.ColdResume > 0 && !h.toolgateDown {
		h.coldResume(ctx, ColdResumeCase{Conversations: cfg.ColdResume, Settle: max(cfg.Settle, 0)})
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	if cfg.CodecTime > 0 {
		rows, err := codecRows(cfg.CodecTime)
		if err != nil {
			return nil, err
		}
		h.res.Cases = append(h.res.Cases, rows...)
		fmt.Fprintf(cfg.Progress, "%-30s %d benchmarks of %s each\n", "codec", len(rows), cfg.CodecTime)
	}
	res := h.res
	FinishRows(res)
	if len(res.Errors) == 0 {
		res.Errors = nil
	}
	res.Seconds = time.Since(res.Started).Seconds()
	return res, nil
}

// newResults are the results of a run of cfg about to start, with the
// machine it runs on.
func newResults(cfg Config) *Results {
	mode := "full"
	if cfg.Quick {
		mode = "quick"
	}
	hostname, _ := os.Hostname()
	return &Results{
		Mode:    mode,
		Started: time.Now().UTC(),
		Host: Host{
			GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
			CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Hostname: hostname,
		},
		Window: cfg.Window, Calls: cfg.Calls, Warmup: cfg.Warmup,
		Note:   cfg.Note,
		Errors: map[string]string{},

		ReplicaGOMAXPROCS: max(cfg.ReplicaGOMAXPROCS, 0),
	}
}

// harnessRun is one run of the harness: its config and environment, the
// results so far, and whether toolgate's orchestrator was found down (its
// later cases are then skipped, each baseline still measured).
type harnessRun struct {
	cfg          Config
	env          *Env
	res          *Results
	toolgateDown bool
	// sizes are what toolgate stored per record and event at its first
	// batch-1 round trip, for the replica floor; nil: not measured.
	sizes *StorageSizes
}

// toolgateErr records why toolgate's measurement of what failed.
func (h *harnessRun) toolgateErr(what string, err error) {
	if errors.Is(err, ErrOrchestratorUnavailable) {
		h.res.Errors[h.cfg.Toolgate.Name()] = err.Error()
		return
	}
	h.res.Errors[h.cfg.Toolgate.Name()+" "+what] = err.Error()
}

// roundTrips measures every round-trip case on raw JetStream, core NATS
// and toolgate.
func (h *harnessRun) roundTrips(ctx context.Context) error {
	cfg := h.cfg
	cases := Matrix(cfg.Workers, cfg.Batches, cfg.Window, cfg.Calls, cfg.Warmup)
	for _, w := range cfg.LatencyInFlight {
		cases = append(cases, Case{Workers: latencyWorkers, Batch: 1, Window: w, Calls: cfg.Calls, Warmup: cfg.Warmup,
			Label: fmt.Sprintf("latency/in_flight=%d/workers=%d", w, latencyWorkers)})
	}
	raw, floor := NewRawTarget(h.env), NewFloorTarget(h.env)
	for _, c := range cases {
		rm, err := measure(ctx, h.res, cfg.Progress, c, raw)
		if err != nil {
			return err
		}
		fm, err := floor.Run(ctx, c)
		if err != nil {
			return err
		}
		var tm *Measurement
		if !h.toolgateDown {
			m, err := measure(ctx, h.res, cfg.Progress, c, cfg.Toolgate)
			switch {
			case err == nil:
				tm = &m
			case ctx.Err() != nil:
				return ctx.Err()
			default:
				h.toolgateErr(c.Name(), err)
				h.toolgateDown = errors.Is(err, ErrOrchestratorUnavailable)
			}
		}
		// The storage floors store what toolgate stored in this run, so
		// they run after it: without and with the look-up of each call
		// toolgate's worker makes before running it.
		var sm, lm *Measurement
		if c.Batch == 1 {
			if tm != nil && h.sizes == nil {
				sizes := StorageSizesOf(tm)
				h.sizes = &sizes
			}
			m, err := measure(ctx, h.res, cfg.Progress, c, NewStorageTarget(h.env, StorageSizesOf(tm)))
			if err != nil {
				return err
			}
			sm = &m
			ml, err := measure(ctx, h.res, cfg.Progress, c, NewStorageLookupTarget(h.env, StorageSizesOf(tm)))
			if err != nil {
				return err
			}
			lm = &ml
		}
		h.res.Cases = append(h.res.Cases, roundTripRows(c, rm, fm, tm, sm, lm)...)
		if c.Label != "" {
			h.res.Cases = append(h.res.Cases, addedLatencyRows(c, rm, tm, sm, lm)...)
		}
		h.res.noteLoad(c.Name(), loadAverage())
		fmt.Fprintf(cfg.Progress, "%-30s %s | core NATS %s | toolgate %s\n", c.Name(), describe(&rm), describe(&fm), describe(tm))
		if sm != nil {
			fmt.Fprintf(cfg.Progress, "%-30s storage floor %s\n", "", describe(sm))
			fmt.Fprintf(cfg.Progress, "%-30s storage floor with the look-up %s\n", "", describe(lm))
		}
	}
	return nil
}

// memory measures the memory, resume and reconcile cases of every size.
func (h *harnessRun) memory(ctx context.Context) error {
	cfg := h.cfg
	var reconciles []Row
	for _, size := range cfg.Paused {
		mc := MemoryCase{Conversations: size, Settle: max(cfg.Settle, 0)}
		rmm, err := measureMemory(ctx, h.res, cfg.Progress, mc, NewRawMemoryTarget(h.env))
		if err != nil {
			return err
		}
		var tmm *MemoryMeasurement
		if m, err := measureMemory(ctx, h.res, cfg.Progress, mc, cfg.ToolgateMemory); err == nil {
			tmm = &m
		} else if ctx.Err() != nil {
			return ctx.Err()
		} else {
			h.toolgateErr(mc.Name(), err)
		}
		h.res.Cases = append(h.res.Cases, memoryRows(mc, rmm, tmm)...)
		h.res.noteLoad(mc.Name(), loadAverage())
		fmt.Fprintf(cfg.Progress, "%-30s raw %s | toolgate %s\n", mc.Name(), describeFigures(&rmm, slices.Concat(memoryMetrics, []string{MetricResumeStorageSeconds})), describeFigures(tmm, memoryMetrics))
		rows := reconcileRows(mc, tmm)
		reconciles = append(reconciles, rows...)
		fmt.Fprintf(cfg.Progress, "%-30s toolgate %s\n", rows[0].Name, describeFigures(tmm, reconcileMetrics))
	}
	h.res.Cases = append(h.res.Cases, reconciles...)
	return nil
}

// LargeResultBytes is the size of each result of the large conversation:
// large, and well within a reply's limit.
const LargeResultBytes = 180 << 10

// maxRemeasure is how many times a side whose figures a stall distorted is
// measured again.
const maxRemeasure = 2

// measure runs case c on t, again while a stall distorts its figures (up to
// maxRemeasure times), and records what it re-measured and what stayed
// distorted.
func measure(ctx context.Context, res *Results, progress io.Writer, c Case, t Target) (Measurement, error) {
	return remeasured(res, progress, c.Name(), t.Name(), func() (Measurement, error) { return t.Run(ctx, c) }, Measurement.Stalled)
}

// measureMemory runs memory case c on t, again while its heap figure is
// implausible or its resume stalled, as measure does for stalls.
func measureMemory(ctx context.Context, res *Results, progress io.Writer, c MemoryCase, t MemoryTarget) (MemoryMeasurement, error) {
	return remeasured(res, progress, c.Name(), t.Name(), func() (MemoryMeasurement, error) { return t.RunMemory(ctx, c) }, MemoryMeasurement.Distorted)
}

// remeasured runs a case on a side, again while distorted says why its
// figures are not to be taken (up to maxRemeasure times), and records in
// res what it measured again and what stayed distorted.
func remeasured[M any](res *Results, progress io.Writer, name, side string, run func() (M, error), distorted func(M) string) (M, error) {
	key := name + " " + side
	var earlier []string
	for attempt := 0; ; attempt++ {
		m, err := run()
		if err != nil {
			return m, err
		}
		why := distorted(m)
		if why == "" {
			if len(earlier) > 0 {
				if res.Remeasured == nil {
					res.Remeasured = map[string]string{}
				}
				res.Remeasured[key] = strings.Join(earlier, "; ")
			}
			return m, nil
		}
		earlier = append(earlier, fmt.Sprintf("attempt %d: %s", attempt+1, why))
		if attempt == maxRemeasure {
			if res.Unreliable == nil {
				res.Unreliable = map[string]string{}
			}
			res.Unreliable[key] = strings.Join(earlier, "; ")
			return m, nil
		}
		fmt.Fprintf(progress, "%-30s %s: %s; measuring again\n", name, side, why)
	}
}

// runLong runs one long-conversation case, unless toolgate is down, and
// appends its rows.
func runLong(ctx context.Context, res *Results, cfg Config, c LongCase, down bool, toolgateErr func(string, error)) {
	var lm *LongMeasurement
	if !down {
		if m, err := cfg.ToolgateLong.RunLong(ctx, c); err == nil {
			lm = &m
		} else if ctx.Err() == nil {
			toolgateErr(c.Name(), err)
		}
	}
	res.Cases = append(res.Cases, longRows(c, lm)...)
	var figs *MemoryMeasurement
	if lm != nil {
		figs = &MemoryMeasurement{Figures: lm.Figures}
	}
	fmt.Fprintf(cfg.Progress, "%-30s toolgate %s\n", c.Name(), describeFigures(figs, longMetrics(c)))
}

func roundTripRows(c Case, raw, floor Measurement, tg, storage, lookup *Measurement) []Row {
	figs := []struct {
		metric string
		f      func(Measurement) float64
	}{
		{MetricThroughput, Measurement.Throughput},
		{MetricP50, func(m Measurement) float64 { return ms(m.Latency.P50) }},
		{MetricP99, func(m Measurement) float64 { return ms(m.Latency.P99) }},
		{MetricAllocBytes, func(m Measurement) float64 { return m.AllocBytes }},
		{MetricCPUPerCall, func(m Measurement) float64 { return m.CPU }},
	}
	rows := make([]Row, 0, len(figs)+2)
	for _, f := range figs {
		row := Row{Name: c.Name(), Metric: f.metric, Workers: c.Workers, Batch: c.Batch,
			Raw: num(f.f(raw)), Floor: num(f.f(floor))}
		if tg != nil {
			row.Toolgate = num(f.f(*tg))
		}
		if storage != nil {
			row.Storage = num(f.f(*storage))
		}
		if lookup != nil {
			row.StorageLookup = num(f.f(*lookup))
		}
		rows = append(rows, row)
	}
	stored := Row{Name: c.Name(), Metric: MetricStoredMessages, Workers: c.Workers, Batch: c.Batch}
	if raw.Stored != nil {
		stored.Raw = num(raw.StoredPerCall())
	}
	if tg != nil && tg.Stored != nil {
		stored.Toolgate = num(tg.StoredPerCall())
	}
	if storage != nil && storage.Stored != nil {
		stored.Storage = num(storage.StoredPerCall())
	}
	if lookup != nil && lookup.Stored != nil {
		stored.StorageLookup = num(lookup.StoredPerCall())
	}
	rows = append(rows, stored)
	if c.Batch == 1 {
		// Per conversation, which is per call at batch 1: the issue's
		// bound is a batch-1 call's.
		trips := Row{Name: c.Name(), Metric: MetricRoundTrips, Workers: c.Workers, Batch: c.Batch}
		if tg != nil {
			trips.Toolgate = num(tg.RoundTrips)
		}
		rows = append(rows, trips)
	}
	return rows
}

// latencyWorkers is the tool-workers of the latency cases.
const latencyWorkers = 4

// Metrics of the latency cases: what a side adds to raw's p50 and p99, in
// milliseconds (Toolgate: toolgate's; Storage: the storage floor's;
// StorageLookup: the storage floor's with the look-up).
const (
	MetricAddedP50 = "added_p50_ms"
	MetricAddedP99 = "added_p99_ms"
)

// addedLatencyRows are the latency a side adds to raw's in case c.
func addedLatencyRows(c Case, raw Measurement, tg, storage, lookup *Measurement) []Row {
	var rows []Row
	for _, f := range []struct {
		metric string
		p      func(Summary) time.Duration
	}{
		{MetricAddedP50, func(s Summary) time.Duration { return s.P50 }},
		{MetricAddedP99, func(s Summary) time.Duration { return s.P99 }},
	} {
		row := Row{Name: c.Name(), Metric: f.metric, Workers: c.Workers, Batch: c.Batch}
		if tg != nil {
			row.Toolgate = num(ms(f.p(tg.Latency) - f.p(raw.Latency)))
		}
		if storage != nil {
			row.Storage = num(ms(f.p(storage.Latency) - f.p(raw.Latency)))
		}
		if lookup != nil {
			row.StorageLookup = num(ms(f.p(lookup.Latency) - f.p(raw.Latency)))
		}
		rows = append(rows, row)
	}
	return rows
}

// memoryMetrics are the memory case's rows, in order.
var memoryMetrics = []string{
	MetricHeapPerConversation, MetricHeapAtPause, MetricOrchestratorHeap, MetricStorePerConversation, MetricResumeSeconds,
	MetricResumeAllocBytes, MetricResumeReads, MetricResumeWrites, MetricReplyPublishSeconds, MetricKVCreateSeconds,
}

// reconcileMetrics are the reconcile rows of a memory case, in order.
var reconcileMetrics = []string{
	MetricReconcileNone, MetricReconcileFinished, MetricReconcileRequestNone, MetricReconcileRequestFinished,
	MetricReconcileGrowth, MetricReconcileCleanup, MetricReconcileCleanupEntries, MetricReconcileReads,
	MetricListPage, MetricListAll, MetricSweepNone, MetricSweepAll,
}

func memoryRows(c MemoryCase, raw MemoryMeasurement, tg *MemoryMeasurement) []Row {
	return figureRows(c.Name(), memoryMetrics, &raw, tg)
}

func reconcileRows(c MemoryCase, tg *MemoryMeasurement) []Row {
	return figureRows("reconcile/finished="+strconv.Itoa(c.Conversations), reconcileMetrics, nil, tg)
}

// figureRows are the rows of metrics of one case measured as figures.
func figureRows(name string, metrics []string, raw, tg *MemoryMeasurement) []Row {
	var rows []Row
	for _, m := range metrics {
		row := Row{Name: name, Metric: m, Batch: 1}
		if raw != nil {
			if v, ok := raw.Figures[m]; ok {
				row.Raw = num(v)
			}
		}
		if tg != nil {
			if v, ok := tg.Figures[m]; ok {
				row.Toolgate = num(v)
			}
		}
		if raw != nil && m == MetricResumeSeconds {
			if v, ok := raw.Figures[MetricResumeStorageSeconds]; ok {
				row.Storage = num(v)
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// codecRows benchmarks every message; raw is JSON, toolgate msgpack.
func codecRows(d time.Duration) ([]Row, error) {
	results, err := RunCodecBenchmarks(d)
	if err != nil {
		return nil, err
	}
	type pair struct{ json, msgpack *CodecResult }
	pairs := map[string]*pair{}
	var order []string
	for i := range results {
		r := &results[i]
		name := "codec/" + r.Benchmark.Message + "/" + r.Benchmark.Op
		p, ok := pairs[name]
		if !ok {
			p = &pair{}
			pairs[name] = p
			order = append(order, name)
		}
		if codecName(r.Benchmark.ContentType) == "json" {
			p.json = r
		} else {
			p.msgpack = r
		}
	}
	var rows []Row
	for _, name := range order {
		p := pairs[name]
		if p.json == nil || p.msgpack == nil {
			return nil, fmt.Errorf("codec %s: a codec is missing", name)
		}
		for _, m := range []struct {
			metric string
			f      func(*CodecResult) float64
		}{
			{MetricCodecNsPerOp, func(r *CodecResult) float64 { return r.NsPerOp }},
			{MetricCodecBytesPerOp, func(r *CodecResult) float64 { return r.BytesPerOp }},
			{MetricCodecAllocsPerOp, func(r *CodecResult) float64 { return r.AllocsPerOp }},
		} {
			rows = append(rows, Row{Name: name, Metric: m.metric, Raw: num(m.f(p.json)), Toolgate: num(m.f(p.msgpack))})
		}
	}
	sizes, err := WireSizes()
	if err != nil {
		return nil, err
	}
	for _, m := range CodecMessages() {
		s := sizes[m.Name]
		rows = append(rows, Row{Name: "codec/" + m.Name + "/size", Metric: MetricCodecWireBytes,
			Raw: num(float64(s[0])), Toolgate: num(float64(s[1]))})
	}
	return rows, nil
}

func describe(m *Measurement) string {
	if m == nil {
		return "—"
	}
	s := fmt.Sprintf("%7.0f calls/s p50 %6.2f ms p99 %6.2f ms", m.Throughput(), ms(m.Latency.P50), ms(m.Latency.P99))
	if m.Redelivered > 0 {
		s += fmt.Sprintf(" (%d redelivered)", m.Redelivered)
	}
	if why := m.Stalled(); why != "" {
		s += fmt.Sprintf(" (%s: figures not meaningful)", why)
	}
	if m.Stored != nil {
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(m.Stored)) {
			part := fmt.Sprintf("%s %.2f", name, m.Stored[name])
			if n := m.StoredBytes[name]; n > 0 {
				part += fmt.Sprintf(" (%.0f B)", n)
			}
			parts = append(parts, part)
		}
		s += fmt.Sprintf(" [stored per call %.2f: %s]", m.StoredPerCall(), strings.Join(parts, ", "))
	}
	if len(m.Periodic) > 0 {
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(m.Periodic)) {
			parts = append(parts, fmt.Sprintf("%s %.2f", name, m.Periodic[name]))
		}
		s += fmt.Sprintf(" [per second, whatever the calls: %s]", strings.Join(parts, ", "))
	}
	if m.StateWrites > 0 {
		s += fmt.Sprintf(" [per call: %.2f appends, %.0f B; %.2f round trips per conversation]", m.StateWrites, m.StateBytes, m.RoundTrips)
	}
	return s
}

func describeFigures(m *MemoryMeasurement, metrics []string) string {
	if m == nil {
		return "—"
	}
	var parts []string
	for _, k := range metrics {
		if v, ok := m.Figures[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %s", k, fmtNum(v)))
		}
	}
	return strings.Join(parts, ", ")
}

// Files in the output folder.
const (
	FileJSON     = "results.json"
	FileMarkdown = "results.md"
	FilePlot     = "plot.png"
)

// Save compares r with the previous results.json in dir (when it exists
// and has the same mode and transport), records the regressions in r,
// and writes results.json, results.md and plot.png. It returns the
// previous results.
func Save(dir string, r *Results) (*Results, error) {
	prev, err := ReadJSON(filepath.Join(dir, FileJSON))
	if err != nil {
		return nil, err
	}
	r.Regressions, r.Previous = nil, ""
	if prev != nil && prev.Mode == r.Mode && prev.transport() == r.transport() {
		r.Regressions = Compare(prev, r, RegressionThreshold)
		r.Previous = fmt.Sprintf("%s (%s)", FileJSON, prev.Started.UTC().Format(time.RFC3339))
	}
	if err := WriteJSON(filepath.Join(dir, FileJSON), r); err != nil {
		return nil, err
	}
	var md strings.Builder
	if err := WriteMarkdown(&md, r); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(dir, FileMarkdown), []byte(md.String())); err != nil {
		return nil, fmt.Errorf("write %s: %w", FileMarkdown, err)
	}
	var png strings.Builder
	if err := WritePlot(&png, r); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(dir, FilePlot), []byte(png.String())); err != nil {
		return nil, fmt.Errorf("write %s: %w", FilePlot, err)
	}
	return prev, nil
}

// Headline prints the ratios the issue sets targets for, the regressions
// and what was not measured; the harness prints it last.
//
// A goal's row shows the ratio its target reads (goalRatio).
func Headline(w io.Writer, r *Results) {
	var b strings.Builder
	rebased(&b, r)
	b.WriteString("\n== goals: toolgate / its storage floor >= 0.7 (batch-1 throughput), p50 and p99 <= 3 x raw, " +
		"orchestrator heap (toolgate - raw) <= 4096 B per paused conversation, cold resume >= 0.5 x in cache, " +
		"CPU per call at 2 and 3 orchestrators <= 1.15 x at 1, " +
		"<= 6 stored messages and <= 3 round trips per batch-1 call, last/first calls of a long conversation <= 1.2, " +
		"history >= 5 MiB completes, reconcile with finished conversations <= 1.5 x with none) ==\n")
	for _, name := range sortedKeys(r.Errors) {
		fmt.Fprintf(&b, "not measured: %s: %s\n", name, r.Errors[name])
	}
	fmt.Fprintf(&b, "%-32s %-28s %12s %12s %8s  %s\n", "case", "metric", "raw", "toolgate", "ratio", "target")
	for _, row := range r.Cases {
		if row.Target == "" {
			continue
		}
		result := fmtPass(row.Pass)
		if row.Pass == nil {
			result = "not measured"
		}
		fmt.Fprintf(&b, "%-32s %-28s %12s %12s %8s  %s: %s\n", row.Name, row.Metric,
			fmtPtr(row.Raw), fmtPtr(row.Toolgate), fmtPtr(goalRatio(row)), row.Target, strings.Trim(result, "*"))
	}
	storageLines(&b, r.Cases)
	switch {
	case r.Previous == "":
		b.WriteString("regressions: no previous results of this mode to compare with\n")
	case len(r.Regressions) == 0:
		fmt.Fprintf(&b, "regressions: none beyond %.0f %% against %s\n", 100*RegressionThreshold, r.Previous)
	default:
		fmt.Fprintf(&b, "regressions beyond %.0f %% against %s (%d on the toolgate side):\n",
			100*RegressionThreshold, r.Previous, len(toolgateRegressions(r.Regressions)))
		for _, g := range r.Regressions {
			fmt.Fprintf(&b, "  %s\n", g)
		}
		if r.Note == "" {
			b.WriteString("  no note explains them: run again with NOTE=\"...\" (make) or -note\n")
		}
	}
	io.WriteString(w, b.String())
}

// headlineMetrics are the figures of the re-based headline (issue 44):
// what a user feels, with raw JetStream as the reference column.
var headlineMetrics = map[string]bool{
	MetricThroughput: true, MetricCPUPerCall: true, MetricP50: true, MetricP99: true,
	MetricAddedP50: true, MetricAddedP99: true,
	MetricHeapPerConversation: true, MetricOrchestratorHeap: true, MetricStorePerConversation: true,
	MetricCallsPerSecond: true, MetricCPUOverOneReplica: true,
	MetricResumeRateInCache: true, MetricResumeRateCold: true, MetricColdOverInCache: true, MetricColdReads: true, MetricColdLogReads: true,
	MetricResumeCPUInCache: true, MetricResumeCPUCold: true, MetricColdCPUOverInCache: true,
}

// rebased writes the headline's figures: batch-1 throughput against the
// storage floor, CPU per call, the latency cases, memory and store bytes
// per paused conversation, the replica and cold-resume cases, each with
// the load average at its end where recorded.
func rebased(b *strings.Builder, r *Results) {
	b.WriteString("\n== headline: what toolgate costs a user; raw JetStream is the reference, storage = raw storing what toolgate stores, stor+lu = storage with toolgate's look-up of each call ==\n")
	fmt.Fprintf(b, "%-48s %-34s %10s %10s %10s %10s %8s %8s  %s\n", "case", "metric", "raw", "storage", "stor+lu", "toolgate", "tg/stor", "tg/s+lu", "load")
	for _, row := range r.Cases {
		if !headlineMetrics[row.Metric] {
			continue
		}
		roundTrip := strings.HasPrefix(row.Name, "roundtrip/")
		switch {
		case roundTrip && row.Batch != 1:
			continue
		case roundTrip && (row.Metric == MetricP50 || row.Metric == MetricP99):
			continue // the latency cases' are the ones at 1 and 10 in flight
		}
		per := func(floor *float64) string {
			if floor != nil && row.Toolgate != nil && *floor != 0 && row.Metric != MetricAddedP50 && row.Metric != MetricAddedP99 {
				return fmtNum(*row.Toolgate / *floor)
			}
			return ""
		}
		fmt.Fprintf(b, "%-48s %-34s %10s %10s %10s %10s %8s %8s  %s\n", row.Name, row.Metric,
			fmtPtr(row.Raw), fmtPtr(row.Storage), fmtPtr(row.StorageLookup), fmtPtr(row.Toolgate),
			per(row.Storage), per(row.StorageLookup), r.Load[row.Name])
	}
}

// storageLines tells, for each row with a storage floor (batch-1
// throughput, resume), what toolgate's storage alone makes of raw's figure
// and what toolgate makes of the floor's.
func storageLines(b *strings.Builder, rows []Row) {
	for _, row := range rows {
		if row.Storage == nil || *row.Storage == 0 {
			continue
		}
		switch row.Metric {
		case MetricThroughput:
			fmt.Fprintf(b, "%-32s storage floor %s calls/s", row.Name, fmtNum(*row.Storage))
		case MetricResumeSeconds:
			fmt.Fprintf(b, "%-32s storage floor of the resume %s s", row.Name, fmtNum(*row.Storage))
		default:
			continue
		}
		if row.Raw != nil && *row.Raw != 0 {
			fmt.Fprintf(b, " = %s x raw", fmtNum(*row.Storage / *row.Raw))
		}
		if row.Toolgate != nil {
			fmt.Fprintf(b, "; toolgate = %s x the storage floor", fmtNum(*row.Toolgate / *row.Storage))
		}
		b.WriteString("\n")
		if row.Metric == MetricThroughput && row.StorageLookup != nil && *row.StorageLookup != 0 {
			fmt.Fprintf(b, "%-32s storage floor with the look-up %s calls/s", row.Name, fmtNum(*row.StorageLookup))
			if row.Raw != nil && *row.Raw != 0 {
				fmt.Fprintf(b, " = %s x raw", fmtNum(*row.StorageLookup / *row.Raw))
			}
			if row.Toolgate != nil {
				fmt.Fprintf(b, "; toolgate = %s x the floor with the look-up", fmtNum(*row.Toolgate / *row.StorageLookup))
			}
			b.WriteString("\n")
		}
	}
}

// goalRatio is the ratio row's target is checked against: toolgate over
// its storage floor for a goal set on the floor, else over raw.
func goalRatio(row Row) *float64 {
	if g, ok := goals[row.Metric]; ok && g.storageMin > 0 && row.Toolgate != nil && row.Storage != nil && *row.Storage != 0 {
		return num(*row.Toolgate / *row.Storage)
	}
	return row.Ratio
}
