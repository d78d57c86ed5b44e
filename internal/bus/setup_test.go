package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/wire"
)

// signalWriter closes seen the first time a log line contains want.
type signalWriter struct {
	want string
	once sync.Once
	seen chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(w.want)) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// Setup sent to a cluster that has no meta leader yet is not answered; it
// gives up on the unanswered request and asks again, so it succeeds once the
// other nodes join, well before its context ends.
func TestSetupRetriesUntilTheClusterHasALeader(t *testing.T) {
	t.Parallel()
	var ports []int
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	start := func(i int) *embedded.Server {
		return startServerCfg(t, embedded.ServerConfig{
			StoreDir: t.TempDir(), Listen: "127.0.0.1:-1",
			ServerName: fmt.Sprintf("n%d", i), Logger: testLogger(t),
			Cluster: &embedded.ClusterConfig{
				Name: "tg", Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]), Routes: routes,
				User: "route", Password: "route-pw",
			},
		})
	}
	first := start(0)
	retried := &signalWriter{want: "setup step failed; retrying", seen: make(chan struct{})}
	b := bustest.ConnectConfig(t, first, bus.ConnConfig{Name: "setup",
		Logger: slog.New(slog.NewTextHandler(retried, &slog.HandlerOptions{Level: slog.LevelWarn}))})

	done := make(chan error, 1)
	go func() { done <- b.Setup(ctxT(t), bus.SetupConfig{Replicas: 3}) }()
	bustest.Recv(t, retried.seen, "a retried setup step")
	select {
	case err := <-done:
		t.Fatalf("Setup returned %v before the cluster had a leader", err)
	default:
	}
	start(1)
	start(2)
	if err := bustest.Recv(t, done, "setup"); err != nil {
		t.Fatalf("Setup: %v", err)
	}
	info, err := b.JetStream().Stream(ctxT(t), wire.StreamAudit)
	if err != nil {
		t.Fatalf("audit stream after setup: %v", err)
	}
	if got := info.CachedInfo().Config.Replicas; got != 3 {
		t.Errorf("audit stream replicas = %d, want 3", got)
	}
}

// A refusal is not retried: Setup by a user who may not manage streams
// fails at once with the permission error.
func TestSetupPermissionDeniedFailsAtOnce(t *testing.T) {
	t.Parallel()
	perms, err := bus.RolePermissions(bus.RoleWorker)
	if err != nil {
		t.Fatal(err)
	}
	srv := bustest.StartServer(t, embedded.ServerConfig{Users: []bus.User{{Name: "w", Password: "w-pw", Permissions: perms}}})
	b := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "w", User: "w", Password: "w-pw", Role: bus.RoleWorker, Logger: testLogger(t)})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err = b.Setup(ctx, bus.SetupConfig{})
	if !errors.Is(err, bus.ErrPermissionDenied) {
		t.Fatalf("Setup = %v, want a permission error", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("Setup returned only when its context ended: %v", err)
	}
	if !strings.Contains(err.Error(), "setup") {
		t.Errorf("error %q does not say it is from setup", err)
	}
}

// A stream that is not there yet tells the operator what to do (start the
// orchestrator first), not which Go function to call.
func TestNotSetUpSaysWhatToDo(t *testing.T) {
	t.Parallel()
	b := bustest.Connect(t, bustest.NewServer(t), "not-set-up")
	_, err := b.GetDeadLetter(ctxT(t), 1)
	if err == nil || !strings.Contains(err.Error(), "start the orchestrator first") || strings.Contains(err.Error(), "Setup first") {
		t.Errorf("err = %v, want it to say to start the orchestrator first", err)
	}
}
