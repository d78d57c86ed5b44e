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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
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

// waitTerminal waits until the conversation is completed or failed. A
// conversation that does not end fails the test with what it waits for
// (describeStuck), read from js when it is given.
func waitTerminal(t *testing.T, o *orchestrator.Orchestrator, id string, js ...jetstream.JetStream) *conversation.State {
	t.Helper()
	var c *conversation.State
	began := time.Now()
	deadline := began.Add(clWait)
	tick := 5 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := o.Conversation(ctx, id)
		cancel()
		state := ""
		if err != nil {
			state = err.Error()
		} else {
			c, state = got, string(got.Status)
			if c.Status.Terminal() {
				return c
			}
		}
		if time.Now().After(deadline) {
			var j jetstream.JetStream
			if len(js) > 0 {
				j = js[0]
			}
			t.Fatalf("timed out after %s waiting for conversation %s to end; last state: %s\n%s",
				clWait, id, state, describeStuck(c, j))
		}
		time.Sleep(tick)
		tick = min(tick*2, 100*time.Millisecond)
	}
}

// describeStuck says what a conversation that does not end waits for: its
// lease and runs, each call of its pending batch (kind, whether published,
// approved or answered, its deadline), and, read from js, the messages of
// the batch's run still in the calls, approvals and replies streams and
// the consumers' state, so that a lost call, request, reply or decision
// shows as such rather than as a bare "paused".
func describeStuck(c *conversation.State, js jetstream.JetStream) string {
	if c == nil {
		return "conversation never read"
	}
	var b strings.Builder
	now := time.Now()
	fmt.Fprintf(&b, "  status %s, %d runs, stale replies %d", c.Status, len(c.Runs), c.StaleReplies)
	if c.Lease != nil {
		fmt.Fprintf(&b, ", lease %s run %s until %s (%s from now)", c.Lease.Owner, c.Lease.RunID,
			c.Lease.Until.Format(time.RFC3339Nano), c.Lease.Until.Sub(now).Round(time.Millisecond))
	} else {
		b.WriteString(", no lease")
	}
	b.WriteString("\n")
	for _, r := range c.Runs {
		fmt.Fprintf(&b, "  run %+v\n", *r)
	}
	if c.Batch == nil {
		b.WriteString("  no pending batch\n")
		return b.String()
	}
	bt := c.Batch
	fmt.Fprintf(&b, "  batch of run %s: follow-up %q, inline %v, unknown replies %d\n",
		bt.RunID, bt.FollowUpRunID, bt.Inline, bt.UnknownReplies)
	for _, pc := range bt.Calls {
		reply := "none"
		if pc.Reply != nil {
			reply = fmt.Sprintf("%s by %s at %s", pc.Reply.Outcome, pc.Reply.By, pc.Reply.At.Format(time.RFC3339Nano))
		}
		approval := "none"
		if pc.Approval != nil {
			approval = fmt.Sprintf("%s by %s at %s", pc.Approval.Outcome, pc.Approval.By, pc.Approval.At.Format(time.RFC3339Nano))
		}
		fmt.Fprintf(&b, "  call %s %s kind %s: published %v at %s, dispatch %s, approval %s, reply %s, taken %v, deadline %s (%s from now), duplicates %d late %d refused %d %q, approvals %v\n",
			pc.ToolCallID, pc.ToolName, pc.Kind, pc.Published, pc.PublishedAt.Format(time.RFC3339Nano), pc.Dispatch,
			approval, reply, pc.Taken, pc.Deadline.Format(time.RFC3339Nano), pc.Deadline.Sub(now).Round(time.Millisecond),
			pc.Duplicates, pc.Late, pc.Refused, pc.LastRefusal, pc.Approvals)
	}
	if js == nil {
		return b.String()
	}
	for _, stream := range []string{wire.StreamCalls, wire.StreamApprovals, wire.StreamReplies} {
		b.WriteString(streamMessagesOf(js, stream, bt.RunID))
	}
	for _, sc := range [][2]string{{wire.StreamReplies, "orchestrator"}, {wire.StreamApprovals, "bot"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cons, err := js.Consumer(ctx, sc[0], sc[1])
		var ci *jetstream.ConsumerInfo
		if err == nil {
			ci, err = cons.Info(ctx)
		}
		cancel()
		if err != nil {
			fmt.Fprintf(&b, "  consumer %s/%s: %v\n", sc[0], sc[1], err)
			continue
		}
		fmt.Fprintf(&b, "  consumer %s/%s: delivered %d/%d, ack floor %d/%d, pending %d, ack pending %d, redelivered %d, waiting %d\n",
			sc[0], sc[1], ci.Delivered.Consumer, ci.Delivered.Stream, ci.AckFloor.Consumer, ci.AckFloor.Stream,
			ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls, err := js.Stream(ctx, wire.StreamCalls)
	if err != nil {
		return b.String()
	}
	for name := range calls.ConsumerNames(ctx).Name() {
		cons, err := calls.Consumer(ctx, name)
		if err != nil {
			continue
		}
		if ci, err := cons.Info(ctx); err == nil {
			fmt.Fprintf(&b, "  consumer %s/%s: pending %d, ack pending %d, redelivered %d, waiting %d\n",
				wire.StreamCalls, name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting)
		}
	}
	return b.String()
}

// streamMessagesOf lists the messages of stream that belong to run (by
// their run header or subject). Messages are read one by one by sequence:
// the calls stream is a work queue, which takes no ordered consumer, and
// this runs only once a test has failed.
func streamMessagesOf(js jetstream.JetStream, stream, run string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Sprintf("  %s: %v\n", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return fmt.Sprintf("  %s: %v\n", stream, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  %s: %d messages, seq %d-%d; of the run:\n", stream, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq)
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted (acked from the work queue)
		}
		if m.Header.Get(wire.HeaderRun) == run || strings.Contains(m.Subject, "."+run+".") || strings.HasSuffix(m.Subject, "."+run) {
			fmt.Fprintf(&b, "    seq %d %s at %s: call %s msg id %s, %d bytes\n", m.Sequence, m.Subject,
				m.Time.Format(time.RFC3339Nano), m.Header.Get(wire.HeaderCall), m.Header.Get(wire.HeaderMsgID), len(m.Data))
		}
	}
	return b.String()
}

// returnsPerCall counts the tool returns and retry prompts per tool call
// id in a conversation's history, and lists the ids of its tool calls.
func returnsPerCall(c *conversation.State) (returns map[string]int, calls []string) {
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
