package e2e_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/internal/worker"
)

// clWait bounds every wait on a condition in these tests; generous for a
// loaded 2-core machine under the race detector.
const clWait = 45 * time.Second

func clLogger(t testing.TB) *slog.Logger {
	if os.Getenv("TOOLGATE_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

func clCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), clWait)
	t.Cleanup(cancel)
	return ctx
}

// clWaitFor polls cond until it holds or clWait passes.
func clWaitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	bustest.Poll(t, clWait, what, cond)
}

// freePorts reserves n loopback ports. They are released before use, so
// another process could take one in between; the cluster's route ports
// must be known before any node starts, as every node lists them all.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var lns []net.Listener
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// testCluster is a NATS cluster of embedded servers, each with its own
// store; nodes can be shut down one by one.
type testCluster struct {
	t     *testing.T
	nodes []*embedded.Server
	names []string
	mu    sync.Mutex
	down  map[int]bool
}

func startCluster(t *testing.T, n int, users ...bus.User) *testCluster {
	t.Helper()
	ports := freePorts(t, n)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	c := &testCluster{t: t, down: map[int]bool{}}
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		srv, err := embedded.StartServer(embedded.ServerConfig{
			StoreDir:   t.TempDir(),
			Listen:     "127.0.0.1:-1",
			ServerName: name,
			Users:      users,
			Cluster: &embedded.ClusterConfig{
				Name:   "toolgate-test",
				Listen: fmt.Sprintf("127.0.0.1:%d", ports[i]),
				Routes: routes,
			},
			Logger: clLogger(t).With("node", name),
		})
		if err != nil {
			t.Fatalf("start node %s: %v", name, err)
		}
		c.nodes = append(c.nodes, srv)
		c.names = append(c.names, name)
		t.Cleanup(srv.Shutdown)
	}
	// Clustered JetStream answers only once the meta group has a leader
	// and every node has caught up with it.
	clWaitFor(t, "a JetStream meta leader", func() (bool, string) {
		leaders, current := 0, 0
		for _, s := range c.nodes {
			ns := s.NATSServer()
			if ns.JetStreamIsLeader() {
				leaders++
			}
			if ns.JetStreamIsCurrent() {
				current++
			}
		}
		return leaders == 1 && current == n, fmt.Sprintf("leaders=%d current=%d", leaders, current)
	})
	return c
}

// URL lists the client URLs of every node, for bus.ConnConfig.URL.
func (c *testCluster) URL() string {
	var urls []string
	for _, s := range c.nodes {
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}

// streamLeader is the index of the node leading stream, or -1.
func (c *testCluster) streamLeader(stream string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.nodes {
		if !c.down[i] && s.NATSServer().JetStreamIsStreamLeader("$G", stream) {
			return i
		}
	}
	return -1
}

func (c *testCluster) metaLeader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, s := range c.nodes {
		if !c.down[i] && s.NATSServer().JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

func (c *testCluster) kill(i int) {
	c.mu.Lock()
	c.down[i] = true
	c.mu.Unlock()
	c.nodes[i].Shutdown()
}

// connect opens a connection to the cluster, closed at cleanup.
func (c *testCluster) connect(name string, cfg bus.ConnConfig) *bus.Bus {
	c.t.Helper()
	cfg.URL, cfg.Name = c.URL(), name
	if cfg.Logger == nil {
		cfg.Logger = clLogger(c.t)
	}
	b, err := bus.Connect(clCtx(c.t), cfg)
	if err != nil {
		c.t.Fatalf("connect %s: %v", name, err)
	}
	c.t.Cleanup(b.Close)
	return b
}

// setupRetry runs Setup until the cluster accepts it: right after the meta
// leader is elected, stream creation can still be refused for lack of
// peers.
func setupRetry(t *testing.T, b *bus.Bus, cfg bus.SetupConfig) {
	t.Helper()
	var last error
	clWaitFor(t, "setup", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		last = b.Setup(ctx, cfg)
		if last == nil {
			return true, ""
		}
		return false, last.Error()
	})
}

// startWorker runs the built-in tools on b in a fresh sandbox; it returns
// the sandbox. ackWait bounds how long a call whose ack was lost (a node
// went down) waits for its redelivery.
func startWorker(t *testing.T, sys *testkit.System, b *bus.Bus, id string, concurrency int, ackWait time.Duration) string {
	t.Helper()
	sandbox := filepath.Join(t.TempDir(), "sandbox")
	ts, err := testkit.BuiltinTools(sandbox)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sys.Worker(clCtx(t), id, worker.Config{
		Bus: b, Tools: ts, ID: id, Concurrency: concurrency, AckWait: ackWait,
		Logger: clLogger(t), DrainTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, id, p.Stop)
	return sandbox
}

// seedPolicy denies deletes and approves the rest (the seed's example).
const seedPolicy = testkit.SeedPolicy

const seedPrompt = "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`"

func startApprover(t *testing.T, sys *testkit.System, b *bus.Bus, id string, key ed25519.PrivateKey, ackWait time.Duration) {
	t.Helper()
	p, err := sys.Approver(clCtx(t), approver.Config{Bus: b, ID: id, Key: key, Logger: clLogger(t),
		Consume: bus.ConsumeConfig{AckWait: ackWait}}, seedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, id, p.Stop)
}

// startOrch starts an orchestrator (the demo agent unless cfg has one),
// stopped at cleanup.
func startOrch(t testing.TB, sys *testkit.System, cfg orchestrator.Config) *orchestrator.Orchestrator {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = clLogger(t)
	}
	o, err := sys.Orchestrator(clCtx(t), "orchestrator", cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, "orchestrator", o.Stop)
	return o.Orchestrator
}

// stopAtCleanup stops a part when the test ends, before the connections
// it was given close, and fails the test on its error.
func stopAtCleanup(t testing.TB, name string, stop func(context.Context) error) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), clWait)
		defer cancel()
		if err := stop(ctx); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	})
}

// waitTerminal waits until the conversation is completed or failed.
func waitTerminal(t *testing.T, o *orchestrator.Orchestrator, id string) *orchestrator.Conversation {
	t.Helper()
	var c *orchestrator.Conversation
	clWaitFor(t, "conversation "+id+" to end", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		if c, err = o.Conversation(ctx, id); err != nil {
			return false, err.Error()
		}
		return c.Status.Terminal(), string(c.Status)
	})
	return c
}

// returnsPerCall counts the tool returns and retry prompts per tool call
// id in a conversation's history, and lists the ids of its tool calls.
func returnsPerCall(c *orchestrator.Conversation) (returns map[string]int, calls []string) {
	returns = map[string]int{}
	for _, m := range c.History {
		for _, p := range m.Parts {
			switch p.Kind {
			case "tool-return", "retry-prompt":
				returns[p.ToolCallID]++
			case "tool-call":
				calls = append(calls, p.ToolCallID)
			}
		}
	}
	return returns, calls
}
