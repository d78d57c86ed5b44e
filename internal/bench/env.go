package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/testkit"
)

// EnvConfig configures the embedded server every target of a run shares.
type EnvConfig struct {
	// StoreDir holds the file store. Empty: a new temporary directory,
	// removed by Close.
	StoreDir string
	// SyncAlways makes the file store fsync every write. Defaults to
	// false, the server's default (fsync every two minutes).
	SyncAlways bool
	// Logger receives the server's log. nil discards it.
	Logger *slog.Logger
	// Transport is how every side connects to the server. Defaults to
	// TransportInProcess.
	Transport Transport
}

// Transport is how the sides of a run connect to the server.
type Transport string

const (
	// TransportInProcess connects without TCP, as an orchestrator
	// connects to the server it embeds.
	TransportInProcess Transport = "in-process"
	// TransportTCP connects over loopback TCP, as every part in a process
	// of its own does (the workers and approvers of `make run`, and every
	// part of a deployment on a NATS of its own).
	TransportTCP Transport = "tcp"
)

// ParseTransport reads a Transport by its name.
func ParseTransport(s string) (Transport, error) {
	switch t := Transport(s); t {
	case TransportInProcess, TransportTCP:
		return t, nil
	}
	return "", fmt.Errorf("unknown transport %q (want %s or %s)", s, TransportInProcess, TransportTCP)
}

// Env is an embedded NATS server with JetStream and a file store, reached
// in-process or over loopback TCP (EnvConfig.Transport): a system of the
// kit, set up by each case for itself.
type Env struct {
	sys       *testkit.System
	logger    *slog.Logger
	transport Transport

	sandboxOnce sync.Once
	sandboxDir  string
}

// NewEnv starts the embedded server.
func NewEnv(cfg EnvConfig) (*Env, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Transport == "" {
		cfg.Transport = TransportInProcess
	}
	if _, err := ParseTransport(string(cfg.Transport)); err != nil {
		return nil, fmt.Errorf("bench env: %w", err)
	}
	sys, err := testkit.Start(context.Background(), testkit.Options{
		Dir:     cfg.StoreDir,
		Server:  embedded.ServerConfig{ServerName: "toolgate-bench", SyncAlways: cfg.SyncAlways},
		TCP:     cfg.Transport == TransportTCP,
		NoSetup: true,
		Logger:  cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("bench env: %w", err)
	}
	e := &Env{sys: sys, logger: cfg.Logger, transport: cfg.Transport}
	if err := e.holdStreamsDir(); err != nil {
		e.Close()
		return nil, fmt.Errorf("bench env: %w", err)
	}
	return e, nil
}

// holdStreamsDir creates a file-stored stream that lives as long as the env.
// Targets delete the streams they create when a case ends, and the server,
// on deleting an account's last stream, removes the account's streams
// directory in a goroutine of its own; a stream the next case creates at that
// moment fails with "error creating store for stream" (mkdir: no such file or
// directory). One stream that is never deleted keeps the directory non-empty,
// so that removal never happens.
func (e *Env) holdStreamsDir() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := e.Connect(ctx, "bench-env")
	if err != nil {
		return err
	}
	defer b.Close()
	sc := jetstream.StreamConfig{Name: "BENCH_ENV", Subjects: []string{"bench.env"}, Storage: jetstream.FileStorage, MaxMsgs: 1}
	if _, err := b.JetStream().CreateStream(ctx, sc); err != nil {
		return fmt.Errorf("create stream %s: %w", sc.Name, err)
	}
	return nil
}

// Server is the embedded server, for targets that start toolgate
// components on it.
func (e *Env) Server() *embedded.Server { return e.sys.Server }

// Logger is the logger the env was configured with.
func (e *Env) Logger() *slog.Logger { return e.logger }

// Transport is how the env's connections reach the server.
func (e *Env) Transport() Transport { return e.transport }

// Connect opens a connection named name, by the env's transport.
func (e *Env) Connect(ctx context.Context, name string) (*bus.Bus, error) {
	b, err := e.sys.Connect(ctx, bus.ConnConfig{Name: name, Logger: e.logger})
	if err != nil {
		return nil, fmt.Errorf("bench connect %s: %w", name, err)
	}
	return b, nil
}

// sandbox is a folder for the built-in tools of tool-workers; the noop
// tool never touches it.
func (e *Env) sandbox() string {
	e.sandboxOnce.Do(func() {
		d, err := os.MkdirTemp("", "toolgate-bench-sandbox-*")
		if err != nil {
			d = filepath.Join(os.TempDir(), "toolgate-bench-sandbox")
		}
		e.sandboxDir = d
	})
	return e.sandboxDir
}

// Close stops the server and removes a temporary store and the sandbox.
func (e *Env) Close() {
	_ = e.sys.Close(context.Background())
	if e.sandboxDir != "" {
		os.RemoveAll(e.sandboxDir)
	}
}
