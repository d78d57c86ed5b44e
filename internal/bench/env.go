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
// approvers of a single-machine deployment use it).
type Env struct {
	srv     *embedded.Server
	tempDir string
	logger  *slog.Logger

	sandboxOnce sync.Once
	sandboxDir  string
}

// NewEnv starts the embedded server.
func NewEnv(cfg EnvConfig) (*Env, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Env{logger: cfg.Logger}
	dir := cfg.StoreDir
	if dir == "" {
		d, err := os.MkdirTemp("", "toolgate-bench-*")
		if err != nil {
			return nil, fmt.Errorf("bench env: %w", err)
		}
		dir, e.tempDir = d, d
	}
	srv, err := embedded.StartServer(embedded.ServerConfig{
		StoreDir:   dir,
		NoListen:   true,
		ServerName: "toolgate-bench",
		SyncAlways: cfg.SyncAlways,
		Logger:     cfg.Logger,
	})
	if err != nil {
		if e.tempDir != "" {
			os.RemoveAll(e.tempDir)
		}
		return nil, fmt.Errorf("bench env: %w", err)
	}
	e.srv = srv
	return e, nil
}

// Server is the embedded server, for targets that start toolgate
// components on it.
func (e *Env) Server() *embedded.Server { return e.srv }

// Logger is the logger the env was configured with.
func (e *Env) Logger() *slog.Logger { return e.logger }

// Connect opens an in-process connection named name.
func (e *Env) Connect(ctx context.Context, name string) (*bus.Bus, error) {
	b, err := e.srv.Connect(ctx, bus.ConnConfig{Name: name, Logger: e.logger})
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
	e.srv.Shutdown()
	if e.tempDir != "" {
		os.RemoveAll(e.tempDir)
	}
	if e.sandboxDir != "" {
		os.RemoveAll(e.sandboxDir)
	}
}
