package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/wire"
)

func TestClusterConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cl   embedded.ClusterConfig
		want string
	}{
		{"no name", embedded.ClusterConfig{Listen: "127.0.0.1:-1"}, "cluster name is empty"},
		{"dotted name", embedded.ClusterConfig{Name: "a.b", Listen: "127.0.0.1:-1"}, "contains a dot"},
		{"bad listen", embedded.ClusterConfig{Name: "c", Listen: "nope"}, "cluster: listen address"},
		{"bad route", embedded.ClusterConfig{Name: "c", Listen: "127.0.0.1:-1", Routes: []string{"::"}}, "want nats-route://host:port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cl := tt.cl
			_, err := embedded.StartServer(embedded.ServerConfig{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", Cluster: &cl})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// r3 is three embedded nodes with authenticated routes, one JetStream
// cluster.
type r3 struct {
	t     *testing.T
	nodes []*embedded.Server
	cfgs  []embedded.ServerConfig
}

// startR3 starts an r3 and returns it with a connection to all of its
// nodes, cfg's URL set, on which Setup has made R3 streams.
func startR3(t *testing.T, cfg bus.ConnConfig) (*r3, *bus.Bus) {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range 3 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	var routes []string
	for _, ln := range lns {
		ln.Close()
	}
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	cl := &r3{t: t}
	for i, p := range ports {
		c := embedded.ServerConfig{
			StoreDir:   t.TempDir(),
			Listen:     "127.0.0.1:-1",
			ServerName: fmt.Sprintf("n%d", i), Logger: testLogger(t),
			Cluster: &embedded.ClusterConfig{
				Name: "tg", Listen: fmt.Sprintf("127.0.0.1:%d", p), Routes: routes,
				User: "route", Password: "route-pw",
			},
		}
		cl.cfgs = append(cl.cfgs, c)
		cl.nodes = append(cl.nodes, startServerCfg(t, c))
	}
	if got, want := cl.nodes[0].ClusterURL(), routes[0]; got != want {
		t.Errorf("ClusterURL = %q, want %q", got, want)
	}
	var urls []string
	for _, n := range cl.nodes {
		urls = append(urls, n.ClientURL())
	}
	cfg.URL = strings.Join(urls, ",")
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	b, err := bus.Connect(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	// Setup itself waits (bounded by its ctx) for the meta leader and the
	// peers a cluster that has just started does not have yet.
	sctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	if err := b.Setup(sctx, bus.SetupConfig{Replicas: 3}); err != nil {
		t.Fatalf("setup R3: %v", err)
	}
	return cl, b
}

// leader is the index of the node that leads stream, or -1.
func (c *r3) leader(stream string) int {
	for i, n := range c.nodes {
		if n.NATSServer().JetStreamIsStreamLeader("$G", stream) {
			return i
		}
	}
	return -1
}

// restart starts node i again, on its store and routes.
func (c *r3) restart(i int) {
	c.t.Helper()
	c.nodes[i] = startServerCfg(c.t, c.cfgs[i])
}

// Three embedded nodes with authenticated routes form one JetStream
// cluster: Setup makes R3 streams, and a message stored before a node goes
// down is still there, and new ones are accepted, with two nodes left.
func TestClusterR3SurvivesANode(t *testing.T) {
	t.Parallel()
	cl, b := startR3(t, bus.ConnConfig{})
	st, err := b.JetStream().Stream(ctxT(t), wire.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("calls stream: replicas %d, cluster %+v", info.Config.Replicas, info.Cluster)
	}
	if _, err := b.PublishCall(ctxT(t), bustest.SampleCall("run1", "c1")); err != nil {
		t.Fatal(err)
	}
	cl.nodes[cl.leader(wire.StreamCalls)].Shutdown()
	deadline := time.Now().Add(wait)
	for {
		_, err = b.PublishCall(ctxT(t), bustest.SampleCall("run1", "c2"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish after the leader went down: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := streamMsgs(t, b, wire.StreamCalls); n != 2 {
		t.Errorf("calls stream holds %d messages, want 2", n)
	}
}

// An append, and a batch of events, made while their streams have no
// leader (two of their three nodes down) are sent again until a leader is
// elected, once a node is back, and stored once, without their caller
// trying again; one with ElectionWait
// disabled fails at once with the server's answer that no stream took
// it. Both are connected to the node that stays up.
func TestClusterWritesWaitForALeader(t *testing.T) {
	t.Parallel()
	cl, b := startR3(t, bus.ConnConfig{})
	ctx := ctxT(t)
	subj := bus.ConversationSubject("celect")
	first, err := b.AppendLog(ctx, bus.StreamConversations, subj, 0, []byte("one"), nil)
	if err != nil {
		t.Fatal(err)
	}
	leader := cl.leader(bus.StreamConversations)
	if leader < 0 {
		t.Fatal("the conversations stream has no leader")
	}
	survivor, back := (leader+1)%3, (leader+2)%3
	resent := make(chan struct{}, 1)
	connect := func(electionWait time.Duration) *bus.Bus {
		logger := slog.New(&signalHandler{Handler: testLogger(t).Handler(), msg: "no stream took the message", ch: resent})
		c, err := bus.Connect(ctx, bus.ConnConfig{URL: cl.nodes[survivor].ClientURL(), ElectionWait: electionWait, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	// Longer than the default: a node restarted under load, and its
	// election, may take more than its 15 s.
	patient, impatient := connect(25*time.Second), connect(-1)
	cl.nodes[leader].Shutdown()
	cl.nodes[back].Shutdown()

	// The node left may have become the leader just before the others went
	// down: it then takes appends it cannot commit, whose answers never
	// come, until it steps down for want of a quorum (their outcome is
	// unknown: one may be stored once a quorum is back, which is why the
	// append tested below is to another conversation). What is tested
	// begins once the node answers that no stream takes the append.
	pctx := bustest.Context(t) // ctx's time went on the cluster's start
	bustest.Poll(t, wait, "the node that stays up answers that no stream takes the append", func() (bool, string) {
		actx, cancel := context.WithTimeout(pctx, 3*time.Second)
		defer cancel()
		began := time.Now()
		_, err := impatient.AppendLog(actx, bus.StreamConversations, subj, first, []byte("impatient"), nil)
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			t.Logf("with ElectionWait disabled: %v after %s", err, time.Since(began).Round(time.Millisecond))
			return true, ""
		}
		if err == nil {
			t.Fatal("an append was stored by a stream with one node of three")
		}
		return false, err.Error()
	})
	select {
	case <-resent:
		t.Fatal("an append with ElectionWait disabled was sent again for want of a leader")
	default:
	}
	// One that waits less than the election takes says why it failed.
	brief := connect(1500 * time.Millisecond)
	if _, err := brief.AppendLog(bustest.Context(t), bus.StreamConversations, subj, first, []byte("brief"), nil); !errors.Is(err, bus.ErrNoLeader) {
		t.Fatalf("append with a short ElectionWait: %v, want ErrNoLeader", err)
	}
	select { // what it logged is not the patient append's
	case <-resent:
	default:
	}

	type result struct {
		seq uint64
		err error
	}
	done := make(chan result, 1)
	began := time.Now()
	other := bus.ConversationSubject("celect2")
	go func() {
		seq, err := patient.AppendLog(bustest.Context(t), bus.StreamConversations, other, 0, []byte("two"), nil)
		done <- result{seq, err}
	}()
	var events []bus.Outgoing
	for _, typ := range []string{"first", "second"} {
		o, err := bus.EventMessage(wire.Event{ConversationID: "celect2", Type: typ, Time: time.Now()}, "")
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, o)
	}
	published := make(chan error, 1)
	go func() { published <- patient.PublishBatch(bustest.Context(t), events) }()
	bustest.Recv(t, resent, "a message sent again for want of a leader")
	cl.restart(back)
	r := bustest.Recv(t, done, "the append once a leader is elected")
	if r.err != nil {
		t.Fatalf("append while the stream had no leader: %v (after %s)", r.err, time.Since(began).Round(time.Millisecond))
	}
	if err := bustest.Recv(t, published, "the events once a leader is elected"); err != nil {
		t.Fatalf("events published while their stream had no leader: %v", err)
	}
	// Read once the cluster answers again: its meta layer may still be
	// settling after the election.
	eventSubj, _ := wire.EventSubject("celect2")
	rctx := bustest.Context(t)
	bustest.Poll(t, wait, "the count of the events stored", func() (bool, string) {
		st, err := patient.JetStream().Stream(rctx, wire.StreamEvents)
		if err != nil {
			return false, err.Error()
		}
		info, err := st.Info(rctx, jetstream.WithSubjectFilter(eventSubj))
		if err != nil {
			return false, err.Error()
		}
		if n := info.State.Subjects[eventSubj]; n != 2 {
			t.Fatalf("%d events stored, want 2", n)
		}
		return true, ""
	})
	t.Logf("stored %s after it was first sent", time.Since(began).Round(time.Millisecond))
	var got []string
	last, err := patient.ReadLog(bustest.Context(t), bus.StreamConversations, other, 0, func(m bus.LogMsg) error {
		got = append(got, string(m.Data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "two" || last != r.seq {
		t.Errorf("log %v (last %d, want %d), want two", got, last, r.seq)
	}
}

// signalHandler sends on ch, without blocking, each time a message that
// begins with msg is logged.
type signalHandler struct {
	slog.Handler
	msg string
	ch  chan<- struct{}
}

func (h *signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, h.msg) {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h *signalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &signalHandler{Handler: h.Handler.WithAttrs(as), msg: h.msg, ch: h.ch}
}

func (h *signalHandler) WithGroup(name string) slog.Handler {
	return &signalHandler{Handler: h.Handler.WithGroup(name), msg: h.msg, ch: h.ch}
}
