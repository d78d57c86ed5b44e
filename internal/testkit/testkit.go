// Package testkit assembles a toolgate system: an embedded JetStream
// server (or a NATS the caller runs, such as a test cluster) with the
// streams and buckets set up, and orchestrators, workers and approvers,
// each on a connection of its own, each stopped — or killed, as a crash
// would — on its own, and all stopped by Close.
//
// The project's package tests, end-to-end cluster tests, soak and bench
// start their systems with it; package toolgatetest is its public face for
// users' tests. This one takes the internal configs (clocks, intervals,
// hooks, counters) that the public kit does not expose, and reports errors
// instead of failing a test, so that the soak and the bench, which are
// programs, use it too (Test adapts it to a test).
package testkit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/worker"
)

// DefaultStopTimeout is Options.StopTimeout's default: generous, for a
// loaded machine.
const DefaultStopTimeout = 30 * time.Second

// Options configure a System.
type Options struct {
	// URL, when set, is the NATS the system runs on (a cluster of the
	// caller's); otherwise an embedded server is started.
	URL string
	// Dir is where the embedded server stores; empty, a temporary
	// directory removed by Close.
	Dir string
	// Listen makes the embedded server listen on a loopback port too, for
	// connections from other processes; otherwise it serves in-process
	// connections only.
	Listen bool
	// TCP connects every part over loopback TCP, as parts in processes
	// of their own connect, instead of in-process; it implies Listen.
	TCP bool
	// Server configures the embedded server beyond the above (users,
	// store limits, fault injection); its StoreDir, Listen, NoListen and
	// Logger are set from the above.
	Server embedded.ServerConfig
	// NoSetup leaves the streams and buckets to the caller; Setup
	// configures them otherwise.
	NoSetup bool
	Setup   bus.SetupConfig
	// Logger receives the server's and every part's log; nil discards it.
	Logger *slog.Logger
	// StopTimeout bounds how long a part is waited for once told to stop
	// (an orchestrator's runs in flight are interrupted then); 0 means
	// DefaultStopTimeout.
	StopTimeout time.Duration
}

// System is a running toolgate deployment.
type System struct {
	// Server is the embedded server, nil on a URL of the caller's.
	Server *embedded.Server

	url         string
	tcp         bool
	log         *slog.Logger
	tmp         string
	stopTimeout time.Duration

	mu     sync.Mutex
	closed bool
	// running are the stops of the parts not stopped yet, by the order
	// they started in (next): Close stops them last first. A part stopped
	// on its own leaves, so that a long-lived system (the bench's) does
	// not keep every part it ever ran.
	running map[uint64]func(context.Context) error
	next    uint64
}

// Start starts a system: the server (unless Options.URL) and the set-up.
func Start(ctx context.Context, opts Options) (sys *System, err error) {
	s := &System{url: opts.URL, tcp: opts.TCP, log: opts.Logger, stopTimeout: cmp.Or(opts.StopTimeout, DefaultStopTimeout)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	defer func() {
		if err != nil {
			err, sys = errors.Join(err, s.Close(context.WithoutCancel(ctx))), nil
		}
	}()
	if s.url == "" {
		dir := opts.Dir
		if dir == "" {
			if s.tmp, err = os.MkdirTemp("", "toolgate-testkit-"); err != nil {
				return s, err
			}
			dir = s.tmp
		}
		cfg := opts.Server
		cfg.StoreDir, cfg.Listen, cfg.NoListen, cfg.Logger = dir, "127.0.0.1:-1", !opts.Listen && !opts.TCP, s.log
		if s.Server, err = embedded.StartServer(cfg); err != nil {
			return s, fmt.Errorf("testkit: start NATS: %w", err)
		}
	}
	if opts.NoSetup {
		return s, nil
	}
	// The first user, when the server has users, is the one that may set
	// up.
	setup := bus.ConnConfig{Name: "testkit-setup"}
	if users := opts.Server.Users; len(users) > 0 {
		setup.User, setup.Password = users[0].Name, users[0].Password
	}
	b, err := s.Connect(ctx, setup)
	if err != nil {
		return s, err
	}
	defer b.Close()
	if err := b.Setup(ctx, opts.Setup); err != nil {
		return s, fmt.Errorf("testkit: setup: %w", err)
	}
	return s, nil
}

// URL is the NATS the system runs on: the caller's, or the embedded
// server's client URL (reachable from other processes with Options.Listen).
func (s *System) URL() string {
	if s.Server != nil {
		return s.Server.ClientURL()
	}
	return s.url
}

// Connect opens a connection named cfg.Name (with the system's logger
// when cfg.Logger is nil); it is the caller's to close.
func (s *System) Connect(ctx context.Context, cfg bus.ConnConfig) (*bus.Bus, error) {
	if cfg.Logger == nil {
		cfg.Logger = s.log
	}
	var (
		b   *bus.Bus
		err error
	)
	if s.Server != nil && !s.tcp {
		b, err = s.Server.Connect(ctx, cfg)
	} else {
		cfg.URL = s.URL()
		b, err = bus.Connect(ctx, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("testkit: connect %s: %w", cfg.Name, err)
	}
	return b, nil
}

// Orchestrator is an orchestrator of a System with its connection.
type Orchestrator struct {
	*orchestrator.Orchestrator
	// Bus is its connection (Config.Bus).
	Bus *bus.Bus
	// Counts is what it counted: Config.Observer, or the counts the kit
	// gave it when the config had none.
	Counts *orchestrator.Counts
	owned  bool
	leave  func()
	once   sync.Once
	err    error
}

// Stop stops the orchestrator and closes its connection if the kit opened
// it; later calls return the first's error.
func (o *Orchestrator) Stop(ctx context.Context) error {
	o.once.Do(func() {
		o.err = o.Orchestrator.Stop(ctx)
		if o.owned {
			o.Bus.Close()
		}
		o.leave()
	})
	return o.err
}

// Orchestrator creates and starts an orchestrator with cfg: on a
// connection of its own named name unless cfg.Bus is set, running the demo
// agent unless cfg.Agent is set, logging to the system's logger unless
// cfg.Logger is set. Close stops it if Stop was not called.
func (s *System) Orchestrator(ctx context.Context, name string, cfg orchestrator.Config) (*Orchestrator, error) {
	if cfg.Agent == nil && len(cfg.Agents) == 0 {
		a, err := agentconfig.Demo()
		if err != nil {
			return nil, err
		}
		cfg.Agent = a
	}
	cfg.Logger = cmp.Or(cfg.Logger, s.log)
	counts, _ := cfg.Observer.(*orchestrator.Counts)
	if counts == nil {
		counts = &orchestrator.Counts{}
		cfg.Observer = counts
	}
	owned, err := s.ownBus(ctx, name, &cfg.Bus)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Orchestrator, error) {
		if owned {
			cfg.Bus.Close()
		}
		return nil, fmt.Errorf("testkit: orchestrator %s: %w", name, err)
	}
	o, err := orchestrator.New(cfg)
	if err != nil {
		return fail(err)
	}
	if err := o.Start(ctx); err != nil {
		return fail(err)
	}
	so := &Orchestrator{Orchestrator: o, Bus: cfg.Bus, Counts: counts, owned: owned}
	so.leave = s.onClose(so.Stop)
	return so, nil
}

// Part is a worker, an approver or anything else that runs until its
// context ends, on a connection of its own.
type Part struct {
	// Bus is its connection.
	Bus *bus.Bus

	owned   bool
	name    string
	timeout time.Duration
	leave   func()
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
	err     error
}

// Go runs fn on connection b (nil: none), which it closes when the part
// stops, until Stop, Kill or Close.
func (s *System) Go(name string, b *bus.Bus, fn func(context.Context) error) *Part {
	return s.goOn(name, b, true, fn)
}

func (s *System) goOn(name string, b *bus.Bus, owned bool, fn func(context.Context) error) *Part {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Part{Bus: b, owned: owned && b != nil, name: name, cancel: cancel, done: make(chan error, 1), timeout: s.stopTimeout}
	go func() { p.done <- fn(ctx) }()
	p.leave = s.onClose(p.Stop)
	return p
}

// Stop cancels the part's context and waits for it (bounded by ctx and
// Options.StopTimeout), then closes its connection. It returns the part's error,
// nil for an end by the cancellation; later calls return the first's.
func (p *Part) Stop(ctx context.Context) error {
	p.once.Do(func() {
		p.cancel()
		t := time.NewTimer(p.timeout)
		defer t.Stop()
		select {
		case err := <-p.done:
			if !errors.Is(err, context.Canceled) {
				p.err = err
			}
		case <-t.C:
			p.err = fmt.Errorf("testkit: %s did not stop within %s", p.name, p.timeout)
		case <-ctx.Done():
			p.err = fmt.Errorf("testkit: %s did not stop: %w", p.name, ctx.Err())
		}
		if p.owned {
			p.Bus.Close()
		}
		p.leave()
	})
	return p.err
}

// Kill ends the part as a crash would: its connection drops first (even
// one the caller gave), so that what it held unacknowledged is
// redelivered, then it is stopped.
func (p *Part) Kill() {
	if p.Bus != nil {
		p.Bus.Conn().Close()
	}
	_ = p.Stop(context.Background())
}

// Worker runs a worker with cfg on a connection of its own named name
// (unless cfg.Bus is set: the caller's stays open when it stops), with
// the system's logger unless cfg.Logger is set.
func (s *System) Worker(ctx context.Context, name string, cfg worker.Config) (*Part, error) {
	cfg.Logger = cmp.Or(cfg.Logger, s.log)
	return s.startPart(ctx, "worker", name, &cfg.Bus, func() (func(context.Context) error, error) {
		w, err := worker.New(cfg)
		if err != nil {
			return nil, err
		}
		return w.Run, nil
	})
}

// Approver runs an approval bot with cfg, deciding by the policy given as
// YAML when cfg.Policy is nil, on a connection of its own named after
// cfg.ID (unless cfg.Bus is set).
func (s *System) Approver(ctx context.Context, cfg approver.Config, policy string) (*Part, error) {
	if cfg.Policy == nil {
		p, err := approver.ParsePolicy([]byte(policy))
		if err != nil {
			return nil, fmt.Errorf("testkit: approver %s: %w", cfg.ID, err)
		}
		cfg.Policy = p
	}
	cfg.Logger = cmp.Or(cfg.Logger, s.log)
	return s.startPart(ctx, "approver", cfg.ID, &cfg.Bus, func() (func(context.Context) error, error) {
		a, err := approver.New(cfg)
		if err != nil {
			return nil, err
		}
		return a.Run, nil
	})
}

// startPart runs as a part named name what build makes, on *b, which it
// opens when nil (the part then closes it when it stops, or at once when
// build fails). build is called once *b is set.
func (s *System) startPart(ctx context.Context, kind, name string, b **bus.Bus, build func() (func(context.Context) error, error)) (*Part, error) {
	owned, err := s.ownBus(ctx, name, b)
	if err != nil {
		return nil, err
	}
	run, err := build()
	if err != nil {
		if owned {
			(*b).Close()
		}
		return nil, fmt.Errorf("testkit: %s %s: %w", kind, name, err)
	}
	return s.goOn(name, *b, owned, run), nil
}

// SeedPolicy is the approver policy of the seed's example: deletes are
// denied with a message, the rest approved.
const SeedPolicy = `
rules:
  - tool: delete_file
    action: deny
    message: Deleting files is not allowed
  - action: approve
`

// BuiltinTools are the built-in file tools working in sandbox (created if
// missing), those named or all when none is.
func BuiltinTools(sandbox string, names ...string) ([]worker.Tool, error) {
	bi, err := worker.NewBuiltin(filepath.Clean(sandbox))
	if err != nil {
		return nil, err
	}
	var ts []worker.Tool
	for _, spec := range worker.BuiltinTools() {
		if len(names) == 0 || slices.Contains(names, spec.Name) {
			ts = append(ts, worker.Tool{Spec: spec, Executor: bi, Kind: "builtin"})
		}
	}
	return ts, nil
}

// Close stops every part still running, last started first, each bounded
// by ctx and Options.StopTimeout, closes the connections and shuts the
// embedded server down; it returns what failed.
func (s *System) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ids := slices.Sorted(maps.Keys(s.running))
	stops := make([]func(context.Context) error, len(ids))
	for i, id := range ids {
		stops[i] = s.running[id]
	}
	s.mu.Unlock()
	var errs []error
	for _, stop := range slices.Backward(stops) {
		sctx, cancel := context.WithTimeout(ctx, s.stopTimeout)
		errs = append(errs, stop(sctx))
		cancel()
	}
	if s.Server != nil {
		s.Server.Shutdown()
	}
	if s.tmp != "" {
		errs = append(errs, os.RemoveAll(s.tmp))
	}
	return errors.Join(errs...)
}

// ownBus opens a connection named name into *b when it is nil, and
// reports whether it did: the part then closes it when it stops.
func (s *System) ownBus(ctx context.Context, name string, b **bus.Bus) (bool, error) {
	if *b != nil {
		return false, nil
	}
	var err error
	*b, err = s.Connect(ctx, bus.ConnConfig{Name: name})
	return err == nil, err
}

// onClose has Close call stop, unless leave (which it returns) is called
// first.
func (s *System) onClose(stop func(context.Context) error) (leave func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		s.running = map[uint64]func(context.Context) error{}
	}
	id := s.next
	s.next++
	s.running[id] = stop
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.running, id)
	}
}
