// Command floord runs one process of the bench's replica floor
// (bench.ServeReplicaFloor): the storage floor's orchestrator half, in a
// process of its own, for bench.ReplicaTarget.RunReplicaFloor. Several
// indexes run that many halves in this one process, each on a connection
// of its own (ReplicaFloorRun.OneProcess).
//
//	floord -nats URL -index K[,K...] -processes N -partitions P -record BYTES -event BYTES
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "floord:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("floord", flag.ContinueOnError)
	var p bench.ReplicaFloorProcess
	fs.StringVar(&p.URL, "nats", "", "NATS URL (required)")
	indexes := fs.String("index", "0", "comma-separated indexes among -processes this process serves")
	fs.IntVar(&p.Processes, "processes", 1, "the floor's processes")
	fs.IntVar(&p.Partitions, "partitions", 0, "the replies' partitions (default -processes)")
	fs.IntVar(&p.Sizes.Record, "record", 0, "bytes stored per log record (default the bench's)")
	fs.IntVar(&p.Sizes.Event, "event", 0, "bytes stored per event message (default the bench's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if p.Partitions == 0 {
		p.Partitions = p.Processes
	}
	def := bench.StorageSizesOf(nil)
	if p.Sizes.Record <= 0 {
		p.Sizes.Record = def.Record
	}
	if p.Sizes.Event <= 0 {
		p.Sizes.Event = def.Event
	}
	g, gctx := errgroup.WithContext(ctx)
	for f := range strings.SplitSeq(*indexes, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("-index: %w", err)
		}
		pi := p
		pi.Index = i
		g.Go(func() error { return bench.ServeReplicaFloor(gctx, pi) })
	}
	return g.Wait()
}
