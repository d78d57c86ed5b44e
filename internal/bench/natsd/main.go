// Command natsd runs one nats-server with JetStream, in a process of its
// own, for the bench's replica case (bench.ReplicaTarget): the server a
// deployment's orchestrators share, or one node of a cluster.
//
//	natsd -listen 127.0.0.1:4222 -store DIR [-name N -cluster 127.0.0.1:6222 -routes nats://127.0.0.1:6223,...]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("natsd", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:4222", "client address")
	store := fs.String("store", "", "JetStream store folder (required)")
	name := fs.String("name", "natsd", "server name")
	cluster := fs.String("cluster", "", "cluster address; empty: a single server")
	routes := fs.String("routes", "", "comma-separated routes to the cluster's other nodes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *store == "" {
		return errors.New("-store is required")
	}
	opts := &server.Options{ServerName: *name, JetStream: true, StoreDir: *store, NoSigs: true}
	var err error
	if opts.Host, opts.Port, err = hostPort(*listen); err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	if *cluster != "" {
		opts.Cluster.Name = "bench"
		if opts.Cluster.Host, opts.Cluster.Port, err = hostPort(*cluster); err != nil {
			return fmt.Errorf("-cluster: %w", err)
		}
		opts.Routes = server.RoutesFromStr(*routes)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return errors.New("not ready for connections after 30s")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}

func hostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	return h, port, err
}
