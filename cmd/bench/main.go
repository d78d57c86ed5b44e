// Command bench is toolgate's performance harness (make bench): the
// deferred call round trip through toolgate against raw JetStream and core
// NATS, paused-conversation memory, and msgpack against JSON. It writes
// results.json, results.md and plot.png into -out, compares them with the
// previous results.json and prints the headline ratios last.
//
//	bench [-quick] [-out bench] [-note TEXT] [-strict] [-cpuprofile FILE] [-memprofile FILE]
//	      [-workers 1,2,4,8] [-batches 1,10,100] [-window N] [-calls N]
//	      [-paused 1000,10000,100000] [-settle 11s] [-long-calls N] [-large-mib N]
//	      [-cold-resume N] [-replicas 1,2,3] [-replica-in-flight 10,50]
//	      [-replica-calls N] [-replica-cluster] [-replica-floor=false]
//	      [-replica-floor-partitions N] [-replica-gomaxprocs N]
//	      [-latency-in-flight 1,10]
//	      [-transport in-process|tcp]
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/toolgate/toolgate/internal/bench"
	"github.com/toolgate/toolgate/internal/cli"
)

func main() {
	cli.Main("bench", func(ctx context.Context, args []string, stdout, _ io.Writer) error { return run(ctx, args, stdout) })
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseFlags(args, stdout)
	if err != nil || o == nil {
		return err
	}
	cfg := o.cfg
	if o.cpuProfile != "" {
		f, err := create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if o.logLevel != "" {
		var level slog.Level
		if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
			return fmt.Errorf("-log: %w", err)
		}
		env, err := bench.NewEnv(bench.EnvConfig{
			Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
			Transport: cfg.Transport,
		})
		if err != nil {
			return err
		}
		defer env.Close()
		cfg.Env = env
	}

	res, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if o.memProfile != "" {
		if err := writeAllocs(o.memProfile); err != nil {
			return err
		}
	}
	if _, err := bench.Save(o.dir, res); err != nil {
		return err
	}
	fmt.Printf("wrote %s, %s and %s in %s\n", bench.FileJSON, bench.FileMarkdown, bench.FilePlot, o.dir)
	bench.Headline(os.Stdout, res)
	if o.strict && len(res.Regressions) > 0 && res.Note == "" {
		return errors.New("figures regressed without a note")
	}
	return nil
}

// options are bench's command line: the harness's config and what to do
// around its run.
type options struct {
	cfg                         bench.Config
	dir, cpuProfile, memProfile string
	logLevel                    string
	strict                      bool
}

// parseFlags reads bench's flags; nil options and no error: --help was
// answered.
func parseFlags(args []string, stdout io.Writer) (*options, error) {
	fs := cli.NewFlagSet(cli.Command{
		Name:  "bench",
		Usage: []string{"bench [-quick] [-out DIR] [-note TEXT] [-strict] [-cpuprofile FILE] [-memprofile FILE]"},
		About: "toolgate against raw JetStream and core NATS; writes results.json, results.md and plot.png.",
	})
	o := &options{}
	quick := fs.Bool("quick", false, "a subset with fewer calls: about six minutes, most of it the replica and cold-resume cases")
	out := fs.String("out", "", "output folder (default bench, or bench/quick with -quick)")
	note := fs.String("note", "", "explanation recorded with the results, e.g. of a flagged regression")
	fs.BoolVar(&o.strict, "strict", false, "exit 1 if a figure regressed by more than 10% and no -note explains it")
	workers := fs.String("workers", "", "comma-separated worker counts (default 1,2,4,8; quick 1,4)")
	batches := fs.String("batches", "", "comma-separated batch sizes (default 1,10,100)")
	window := fs.Int("window", 0, "calls in flight (default 100)")
	calls := fs.Int("calls", 0, "measured calls per round-trip case (default 20000; quick 1000)")
	paused := fs.String("paused", "", "comma-separated numbers of conversations the memory and reconcile cases hold (default 1000,10000,100000; quick 500,2000; -1 skips)")
	longCalls := fs.Int("long-calls", 0, "calls of the long-conversation case (default 300; quick 100; -1 skips)")
	coldResume := fs.Int("cold-resume", 0, "paused conversations of the cold-resume case, resumed with a cache that holds them all and one that holds a quarter (default 20000; quick 4000; -1 skips)")
	latency := fs.String("latency-in-flight", "", "comma-separated calls in flight of the latency cases (batch 1, 4 workers; default 1,10; -1 skips)")
	replicas := fs.String("replicas", "", "comma-separated orchestrator counts of the replica case, each a process on one nats-server process (default 1,2,3; -1 skips)")
	replicaInFlight := fs.String("replica-in-flight", "", "comma-separated conversations in flight of the replica case (default 10,50)")
	replicaCalls := fs.Int("replica-calls", 0, "measured calls of each replica case (default 5000; quick 1000)")
	replicaCluster := fs.Bool("replica-cluster", false, "run the replica case on a three-node NATS cluster too")
	replicaFloorPartitions := fs.Int("replica-floor-partitions", 0, "reply partitions of the replica floor, split over its processes as toolgate's over its replicas (default one per process; toolgate's are 6)")
	replicaFloor := fs.Bool("replica-floor", true, "run the replica floor (raw JetStream storing what toolgate stores, in as many processes) beside each replica count")
	replicaProcs := fs.Int("replica-gomaxprocs", 0, "GOMAXPROCS of the replica case's orchestrator and floor processes, as a container's CPU limit sets it (0 inherits); recorded as replica_gomaxprocs")
	largeMiB := fs.Int("large-mib", 0, "history in MiB the large conversation reaches with results of 180 KiB (default 5; -1 skips)")
	settleFor := fs.Duration("settle", 0, "the memory case's wait, before each heap measurement, for the server's caches of the last writes to expire (default 11s; -1ns measures at once)")
	transport := fs.String("transport", string(bench.TransportInProcess), "how every side connects to the embedded server: in-process, or tcp (loopback, as parts in processes of their own)")
	codecTime := fs.Duration("codec-time", 0, "duration of each codec benchmark (default 1s; quick 50ms; -1ns skips)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile to this file (e.g. bench/cpu.pprof)")
	fs.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile to this file (e.g. bench/mem.pprof)")
	fs.StringVar(&o.logLevel, "log", "", "log the system under test at this level (debug, info, warn, error) to stderr; default: silent")
	pos, err := fs.Parse(args, stdout)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, cli.Usagef("bench", "unexpected arguments %q", pos)
	}
	o.cfg = bench.Config{
		Quick: *quick, Window: *window, Calls: *calls, CodecTime: *codecTime,
		LongCalls: *longCalls, LargeHistory: *largeMiB << 20, Settle: *settleFor, ColdResume: *coldResume,
		Note: *note, Progress: os.Stdout,
	}
	if o.cfg.Transport, err = bench.ParseTransport(*transport); err != nil {
		return nil, fmt.Errorf("-transport: %w", err)
	}
	if *paused == "-1" {
		o.cfg.Paused = []int{-1}
	} else if o.cfg.Paused, err = ints(*paused); err != nil {
		return nil, fmt.Errorf("-paused: %w", err)
	}
	if *latency == "-1" {
		o.cfg.LatencyInFlight = []int{-1}
	} else if o.cfg.LatencyInFlight, err = ints(*latency); err != nil {
		return nil, fmt.Errorf("-latency-in-flight: %w", err)
	}
	o.cfg.ReplicaCalls, o.cfg.ReplicaCluster, o.cfg.NoReplicaFloor = *replicaCalls, *replicaCluster, !*replicaFloor
	o.cfg.ReplicaFloorPartitions = *replicaFloorPartitions
	o.cfg.ReplicaCalls, o.cfg.ReplicaCluster, o.cfg.ReplicaGOMAXPROCS = *replicaCalls, *replicaCluster, *replicaProcs
	if *replicas == "-1" {
		o.cfg.Replicas = []int{-1}
	} else if o.cfg.Replicas, err = ints(*replicas); err != nil {
		return nil, fmt.Errorf("-replicas: %w", err)
	}
	if o.cfg.ReplicaInFlight, err = ints(*replicaInFlight); err != nil {
		return nil, fmt.Errorf("-replica-in-flight: %w", err)
	}
	if o.cfg.Workers, err = ints(*workers); err != nil {
		return nil, fmt.Errorf("-workers: %w", err)
	}
	if o.cfg.Batches, err = ints(*batches); err != nil {
		return nil, fmt.Errorf("-batches: %w", err)
	}
	o.dir = *out
	if o.dir == "" {
		o.dir = "bench"
		if *quick {
			o.dir = filepath.Join("bench", "quick")
		}
	}
	return o, nil
}

func ints(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func create(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.Create(path)
}

func writeAllocs(path string) error {
	f, err := create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		return fmt.Errorf("allocation profile: %w", err)
	}
	return nil
}
