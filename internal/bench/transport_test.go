package bench_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/toolgate/toolgate/internal/bench"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// TestTransport runs a batch-1 round trip on both sides over each
// transport and checks how every connection the server saw came in: all
// over loopback TCP, or all in-process.
func TestTransport(t *testing.T) {
	t.Parallel()
	for _, tr := range []bench.Transport{bench.TransportInProcess, bench.TransportTCP} {
		t.Run(string(tr), func(t *testing.T) {
			t.Parallel()
			env, err := bench.NewEnv(bench.EnvConfig{StoreDir: t.TempDir(), Transport: tr, Logger: bustest.LevelLogger(t, slog.LevelWarn)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(env.Close)
			if env.Transport() != tr {
				t.Fatalf("env transport %q, want %q", env.Transport(), tr)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			c := bench.Case{Workers: 2, Batch: 1, Window: 4, Calls: 12, Warmup: 2}
			for _, target := range []bench.Target{bench.NewRawTarget(env), bench.NewToolgateTarget(env)} {
				m, err := target.Run(ctx, c)
				if err != nil {
					t.Fatalf("%s: %v", target.Name(), err)
				}
				if m.Calls != c.Calls {
					t.Errorf("%s: %d calls, want %d", target.Name(), m.Calls, c.Calls)
				}
			}

			cz, err := env.Server().NATSServer().Connz(&server.ConnzOptions{State: server.ConnAll, Limit: 10000})
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			for _, ci := range cz.Conns {
				names[ci.Name] = true
				if tcp := ci.IP != ""; tcp != (tr == bench.TransportTCP) {
					t.Errorf("connection %q came from %q, want %s", ci.Name, ci.IP, tr)
				}
			}
			// Both sides' workers and toolgate's orchestrator among them.
			for _, name := range []string{"bench-worker-0", "bench-worker-1", "bench-orchestrator", "bench-orchestrator-events"} {
				if !names[name] {
					t.Errorf("no connection %q among %v", name, names)
				}
			}
		})
	}
	if env, err := bench.NewEnv(bench.EnvConfig{StoreDir: t.TempDir(), Transport: "udp"}); err == nil {
		env.Close()
		t.Error("an env on transport udp started")
	}
}

// TestSaveComparesOneTransport checks that results are compared only
// with results of the same transport, older results counting as
// in-process.
func TestSaveComparesOneTransport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	results := func(tr bench.Transport, throughput float64) *bench.Results {
		r := &bench.Results{Mode: "quick", Transport: tr, Started: time.Now(), Cases: []bench.Row{{
			Name: "roundtrip/workers=2/batch=1", Metric: bench.MetricThroughput, Workers: 2, Batch: 1,
			Raw: f(10000), Toolgate: f(throughput),
		}}}
		bench.FinishRows(r)
		return r
	}
	steps := []struct {
		r         *bench.Results
		compared  bool
		regressed bool
	}{
		{results("", 5000), false, false},                       // nothing before it
		{results(bench.TransportTCP, 2000), false, false},       // in-process before it
		{results(bench.TransportTCP, 1000), true, true},         // tcp before it
		{results(bench.TransportInProcess, 1000), false, false}, // tcp before it
		{results(bench.TransportInProcess, 1000), true, false},  // in-process before it
	}
	for i, s := range steps {
		if _, err := bench.Save(dir, s.r); err != nil {
			t.Fatal(err)
		}
		if compared := s.r.Previous != ""; compared != s.compared {
			t.Errorf("step %d (%q): compared = %v, want %v", i, s.r.Transport, compared, s.compared)
		}
		if regressed := len(s.r.Regressions) > 0; regressed != s.regressed {
			t.Errorf("step %d (%q): regressions %v, want any: %v", i, s.r.Transport, s.r.Regressions, s.regressed)
		}
	}
	saved, err := bench.ReadJSON(filepath.Join(dir, bench.FileJSON))
	if err != nil {
		t.Fatal(err)
	}
	if saved.Transport != bench.TransportInProcess {
		t.Errorf("saved transport %q, want %q", saved.Transport, bench.TransportInProcess)
	}
}
