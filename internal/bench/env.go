package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

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
}

// Env is an embedded NATS server with JetStream and a file store, served
// only to in-process connections (as the orchestrator, workers and
// approvers of a single-machine deployment use it): a system of the kit,
// set up by each case for itself.
type Env struct {
	sys    *testkit.System
	logger *slog.Logger

	sandboxOnce sync.Once
	sandboxDir  string
}

// NewEnv starts the embedded server.
func NewEnv(cfg EnvConfig) (*Env, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	sys, err := testkit.Start(context.Background(), testkit.Options{
		Dir:     cfg.StoreDir,
		Server:  embedded.ServerConfig{ServerName: "toolgate-bench", SyncAlways: cfg.SyncAlways},
		NoSetup: true,
		Logger:  cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("bench env: %w", err)
	}
	return &Env{sys: sys, logger: cfg.Logger}, nil
}

// Server is the embedded server, for targets that start toolgate
// components on it.
func (e *Env) Server() *embedded.Server { return e.sys.Server }

// Logger is the logger the env was configured with.
func (e *Env) Logger() *slog.Logger { return e.logger }

// Connect opens an in-process connection named name.
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
