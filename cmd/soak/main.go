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
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/soak"
)

func main() { cli.Main("soak", run) }

// errInvariants says the soak ran and an invariant failed.
var errInvariants = errors.New("invariants failed")

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet(cli.Command{
		Name:  "soak",
		Usage: []string{"soak [-conversations N] [-calls M] [-seed S] [-duration D] [flags]"},
		About: "Runs toolgate under faults and checks that nothing was lost or applied twice;\nexits 1 if an invariant failed.",
	})
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
	pos, err := fs.Parse(args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return cli.Usagef("soak", "unexpected argument %q", pos[0])
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
