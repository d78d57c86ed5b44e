// Package bustest provides what tests of toolgate's parties need to run
// against a real bus: an embedded JetStream server per test, connections
// closed at cleanup, bounded waits, and readers of what the streams hold.
// Like net/http/httptest, it is for tests only.
package bustest

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/embedded"
)

// Timeout bounds every wait of this package: generous, for a loaded 2-core
// machine running several packages' tests at once.
const Timeout = 30 * time.Second

// Context returns a context that ends after Timeout or when the test's
// cleanup starts, whichever is first.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// NewServer starts an embedded JetStream server on a random loopback port,
// storing in a directory of the test; it is shut down at cleanup.
func NewServer(t testing.TB) *embedded.Server {
	t.Helper()
	return StartServer(t, embedded.ServerConfig{})
}

// StartServer is NewServer with cfg; an empty StoreDir is a directory of
// the test, an empty Listen a random loopback port.
func StartServer(t testing.TB, cfg embedded.ServerConfig) *embedded.Server {
	t.Helper()
	if cfg.StoreDir == "" {
		cfg.StoreDir = t.TempDir()
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:-1"
	}
	srv, err := embedded.StartServer(cfg)
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

// Connect opens an in-process connection named name to srv, closed at
// cleanup; it logs to the test's log.
func Connect(t testing.TB, srv *embedded.Server, name string) *bus.Bus {
	t.Helper()
	return ConnectConfig(t, srv, bus.ConnConfig{Name: name})
}

// ConnectConfig is Connect with cfg; a nil Logger logs to the test's log.
func ConnectConfig(t testing.TB, srv *embedded.Server, cfg bus.ConnConfig) *bus.Bus {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = Logger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	b, err := srv.Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("connect %s: %v", cfg.Name, err)
	}
	t.Cleanup(b.Close)
	return b
}

// Setup creates toolgate's streams and buckets with their defaults.
func Setup(t testing.TB, b *bus.Bus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := b.Setup(ctx, bus.SetupConfig{}); err != nil {
		t.Fatalf("setup: %v", err)
	}
}

// NewBus starts a server (NewServer), sets it up and returns a connection
// to it named "test".
func NewBus(t testing.TB) *bus.Bus {
	t.Helper()
	b := Connect(t, NewServer(t), "test")
	Setup(t, b)
	return b
}
