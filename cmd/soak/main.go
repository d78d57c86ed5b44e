// Command soak runs toolgate under faults and checks that nothing was lost
// or applied twice: N conversations of M deferred calls each, through
// orchestrator replicas, tool-workers and an approver on an embedded NATS
// server, while workers are killed mid-call, results are published twice,
// replicas are restarted and malformed messages are injected. It prints the
// counts and the invariants, and exits 1 if any invariant failed.
//
//	soak -conversations 200 -calls 10 -seed 42 -duration 2m
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/soak"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// errInvariants says the soak ran and an invariant failed.
var errInvariants = errors.New("invariants failed")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg soak.Config
	fs.IntVar(&cfg.Conversations, "conversations", 100, "conversations to run")
	fs.IntVar(&cfg.Calls, "calls", 8, "tool calls the model makes per conversation (every fourth also needs an approval)")
	fs.IntVar(&cfg.Workers, "workers", 4, "tool-workers")
	fs.IntVar(&cfg.Replicas, "replicas", 2, "orchestrator replicas")
	seed := fs.Uint64("seed", 1, "random seed of the faults")
	fs.DurationVar(&cfg.Duration, "duration", time.Minute, "how long faults are injected at most")
	fs.DurationVar(&cfg.Ramp, "ramp", 0, "spread the conversations' starts over this long (default: half the duration)")
	fs.DurationVar(&cfg.FaultEvery, "fault-every", 100*time.Millisecond, "mean gap between two faults")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "bound on the whole run (default: duration + 2m)")
	verbose := fs.Bool("v", false, "log the components (warnings and errors)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	cfg.Seed = *seed
	if *verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	fmt.Fprintf(stdout, "soak: %d conversations × %d calls, %d workers, %d replicas, seed %d, faults for up to %s\n",
		cfg.Conversations, cfg.Calls, cfg.Workers, cfg.Replicas, cfg.Seed, cfg.Duration)
	r, err := soak.Run(ctx, cfg)
	if err != nil {
		return err
	}
	r.Print(stdout)
	if !r.OK() {
		return errInvariants
	}
	return nil
}
