package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Config configures a harness run. Zero values take the defaults of the
// mode (full or quick).
type Config struct {
	// Quick runs a subset with fewer calls, in well under two minutes.
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
	// Paused is the number of conversations the memory case holds.
	// Defaults to 100000; quick: 2000. Negative skips the memory case.
	Paused int
	// CodecTime is the duration of each codec benchmark. Defaults to 1s;
	// quick: 50ms. Negative skips the codec case.
	CodecTime time.Duration
	// Env is the server the targets share. nil: a new one on a temporary
	// file store, closed at the end.
	Env *Env
	// Toolgate and ToolgateMemory are the toolgate side. nil: a
	// ToolgateTarget on Env.
	Toolgate       Target
	ToolgateMemory MemoryTarget
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
	if c.Paused == 0 {
		c.Paused = 100_000
		if c.Quick {
			c.Paused = 2000
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
		if env, err = NewEnv(EnvConfig{}); err != nil {
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
	mode := "full"
	if cfg.Quick {
		mode = "quick"
	}
	hostname, _ := os.Hostname()
	res := &Results{
		Mode:    mode,
		Started: time.Now().UTC(),
		Host: Host{
			GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
			CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Hostname: hostname,
		},
		Window: cfg.Window, Calls: cfg.Calls, Warmup: cfg.Warmup,
		Note:   cfg.Note,
		Errors: map[string]string{},
	}
	toolgateErr := func(what string, err error) {
		if errors.Is(err, ErrOrchestratorUnavailable) {
			res.Errors[cfg.Toolgate.Name()] = err.Error()
			return
		}
		res.Errors[cfg.Toolgate.Name()+" "+what] = err.Error()
	}
	raw, floor := NewRawTarget(env), NewFloorTarget(env)
	toolgateDown := false
	for _, c := range Matrix(cfg.Workers, cfg.Batches, cfg.Window, cfg.Calls, cfg.Warmup) {
		rm, err := raw.Run(ctx, c)
		if err != nil {
			return nil, err
		}
		fm, err := floor.Run(ctx, c)
		if err != nil {
			return nil, err
		}
		var tm *Measurement
		if !toolgateDown {
			m, err := cfg.Toolgate.Run(ctx, c)
			switch {
			case err == nil:
				tm = &m
			case ctx.Err() != nil:
				return nil, ctx.Err()
			default:
				toolgateErr(c.Name(), err)
				toolgateDown = errors.Is(err, ErrOrchestratorUnavailable)
			}
		}
		res.Cases = append(res.Cases, roundTripRows(c, rm, fm, tm)...)
		for side, m := range map[string]*Measurement{"raw": &rm, "toolgate": tm} {
			if m != nil && m.Stalls > 0 {
				if res.Unreliable == nil {
					res.Unreliable = map[string]string{}
				}
				res.Unreliable[c.Name()+" "+side] = fmt.Sprintf("%d stalled pulls", m.Stalls)
			}
		}
		fmt.Fprintf(cfg.Progress, "%-30s %s | core NATS %s | toolgate %s\n", c.Name(), describe(&rm), describe(&fm), describe(tm))
	}

	if cfg.Paused > 0 {
		mc := MemoryCase{Conversations: cfg.Paused}
		rmm, err := NewRawMemoryTarget(env).RunMemory(ctx, mc)
		if err != nil {
			return nil, err
		}
		var tmm *MemoryMeasurement
		if m, err := cfg.ToolgateMemory.RunMemory(ctx, mc); err == nil {
			tmm = &m
		} else if ctx.Err() != nil {
			return nil, ctx.Err()
		} else {
			toolgateErr(mc.Name(), err)
		}
		res.Cases = append(res.Cases, memoryRows(mc, rmm, tmm)...)
		fmt.Fprintf(cfg.Progress, "%-30s raw %s | toolgate %s\n", mc.Name(), describeFigures(&rmm), describeFigures(tmm))
	}

	if cfg.CodecTime > 0 {
		rows, err := codecRows(cfg.CodecTime)
		if err != nil {
			return nil, err
		}
		res.Cases = append(res.Cases, rows...)
		fmt.Fprintf(cfg.Progress, "%-30s %d benchmarks of %s each\n", "codec", len(rows), cfg.CodecTime)
	}
	FinishRows(res)
	if len(res.Errors) == 0 {
		res.Errors = nil
	}
	res.Seconds = time.Since(res.Started).Seconds()
	return res, nil
}

func roundTripRows(c Case, raw, floor Measurement, tg *Measurement) []Row {
	figs := []struct {
		metric string
		f      func(Measurement) float64
	}{
		{MetricThroughput, Measurement.Throughput},
		{MetricP50, func(m Measurement) float64 { return ms(m.Latency.P50) }},
		{MetricP99, func(m Measurement) float64 { return ms(m.Latency.P99) }},
	}
	rows := make([]Row, 0, len(figs))
	for _, f := range figs {
		row := Row{Name: c.Name(), Metric: f.metric, Workers: c.Workers, Batch: c.Batch,
			Raw: num(f.f(raw)), Floor: num(f.f(floor))}
		if tg != nil {
			row.Toolgate = num(f.f(*tg))
		}
		rows = append(rows, row)
	}
	return rows
}

// memoryMetrics are the memory case's rows, in order.
var memoryMetrics = []string{
	MetricHeapPerConversation, MetricStorePerConversation, MetricResumeSeconds,
	MetricKVCreateSeconds, MetricKVResumeSeconds,
}

func memoryRows(c MemoryCase, raw MemoryMeasurement, tg *MemoryMeasurement) []Row {
	var rows []Row
	for _, m := range memoryMetrics {
		row := Row{Name: c.Name(), Metric: m, Batch: 1}
		if v, ok := raw.Figures[m]; ok {
			row.Raw = num(v)
		}
		if tg != nil {
			if v, ok := tg.Figures[m]; ok {
				row.Toolgate = num(v)
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
	if m.Stalls > 0 {
		s += fmt.Sprintf(" (%d stalled pulls: figures not meaningful)", m.Stalls)
	}
	if m.StateWrites > 0 {
		s += fmt.Sprintf(" [per call: %.2f state writes, %.0f B; %.1f events, %.0f B]", m.StateWrites, m.StateBytes, m.Events, m.EventBytes)
	}
	return s
}

func describeFigures(m *MemoryMeasurement) string {
	if m == nil {
		return "—"
	}
	var parts []string
	for _, k := range memoryMetrics {
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
// and has the same mode), records the regressions in r, and writes
// results.json, results.md and plot.png. It returns the previous results.
func Save(dir string, r *Results) (*Results, error) {
	prev, err := ReadJSON(filepath.Join(dir, FileJSON))
	if err != nil {
		return nil, err
	}
	r.Regressions, r.Previous = nil, ""
	if prev != nil && prev.Mode == r.Mode {
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
func Headline(w io.Writer, r *Results) {
	var b strings.Builder
	b.WriteString("\n== headline: toolgate / raw JetStream (targets: throughput >= 0.5, p50 and p99 <= 3, " +
		"orchestrator heap (toolgate - raw) <= 4096 B per paused conversation, resume <= 2) ==\n")
	for _, name := range sortedKeys(r.Errors) {
		fmt.Fprintf(&b, "not measured: %s: %s\n", name, r.Errors[name])
	}
	fmt.Fprintf(&b, "%-32s %-28s %12s %12s %8s  %s\n", "case", "metric", "raw", "toolgate", "ratio", "target")
	for _, row := range r.Cases {
		if _, ok := goals[row.Metric]; !ok {
			continue
		}
		result := fmtPass(row.Pass)
		if row.Pass == nil {
			result = "not measured"
		}
		fmt.Fprintf(&b, "%-32s %-28s %12s %12s %8s  %s: %s\n", row.Name, row.Metric,
			fmtPtr(row.Raw), fmtPtr(row.Toolgate), fmtPtr(row.Ratio), row.Target, strings.Trim(result, "*"))
	}
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
