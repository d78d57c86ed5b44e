package bus_test

import (
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/wire"
)

const (
	directGetCalls = "$JS.API.DIRECT.GET." + wire.StreamCalls
	msgGetCalls    = "$JS.API.STREAM.MSG.GET." + wire.StreamCalls
)

// getCounter counts the direct gets (when direct) and the message gets
// of the calls stream that reach the server, by subscribing to their
// subjects. A subscriber of the direct gets' subject is an answer to
// them as the server sees it: the server no longer says no one answers.
type getCounter struct {
	t            *testing.T
	b            *bus.Bus
	direct, leds *nats.Subscription
}

func countGets(t *testing.T, b *bus.Bus, direct bool) *getCounter {
	t.Helper()
	c := &getCounter{t: t, b: b}
	var err error
	if direct {
		if c.direct, err = b.Conn().SubscribeSync(directGetCalls); err != nil {
			t.Fatal(err)
		}
	}
	if c.leds, err = b.Conn().SubscribeSync(msgGetCalls); err != nil {
		t.Fatal(err)
	}
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// take returns the direct gets and message gets seen since the last take.
// A request that was answered reached this connection's queue before the
// answer to the flush's ping.
func (c *getCounter) take() (direct, leader int) {
	c.t.Helper()
	if err := c.b.Conn().Flush(); err != nil {
		c.t.Fatal(err)
	}
	drain := func(s *nats.Subscription) int {
		if s == nil {
			return 0
		}
		n, _, err := s.Pending()
		if err != nil {
			c.t.Fatal(err)
		}
		for range n {
			if _, err := s.NextMsg(0); err != nil {
				c.t.Fatal(err)
			}
		}
		return n
	}
	return drain(c.direct), drain(c.leds)
}

// A worker looks a call up with a direct get, which any replica may
// answer: a call found there is queued, with no request to the stream's
// leader; a call not found there is looked up again at the leader (a
// message get, the stream's info, a message get), which alone may say it
// is gone. A withdrawal reads the queue from the leader only.
func TestCallQueuedAsksDirectThenLeader(t *testing.T) {
	t.Parallel()
	// The roles' users, so that the worker's permissions are its role's.
	users := append(roleUsers(t), bus.User{Name: "counter", Password: "counter-pw", Permissions: bus.Permissions{Publish: []string{">"}, Subscribe: []string{">"}}})
	srv := bustest.StartServer(t, embedded.ServerConfig{Users: users})
	conn := func(role string) *bus.Bus { return roleConn(t, srv, role) }
	orch := conn(bus.RoleOrchestrator)
	bustest.Setup(t, orch)
	worker := conn(bus.RoleWorker)
	ctx := bustest.Context(t)
	gets := countGets(t, bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "counter", User: "counter", Password: "counter-pw"}), true)

	call := bustest.SampleCall("run1", "c1")
	queued, err := orch.PublishCall(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := worker.CallQueued(ctx, queued.Sequence); err != nil || !ok {
		t.Fatalf("looking up a queued call: %v %v, want queued", ok, err)
	}
	if direct, leader := gets.take(); direct != 1 || leader != 0 {
		t.Errorf("a queued call looked up with %d direct gets and %d message gets, want 1 and 0", direct, leader)
	}
	if n, err := orch.WithdrawCalls(ctx, call.ToolName, call.RunID, []string{call.ToolCallID}); err != nil || n != 1 {
		t.Fatalf("withdrawing: %d %v, want 1", n, err)
	}
	if direct, leader := gets.take(); direct != 0 || leader == 0 {
		t.Errorf("a withdrawal read the queue with %d direct gets and %d message gets, want none and some", direct, leader)
	}
	if ok, err := worker.CallQueued(ctx, queued.Sequence); err != nil || ok {
		t.Fatalf("looking up a withdrawn call: %v %v, want gone", ok, err)
	}
	if direct, leader := gets.take(); direct != 1 || leader != 2 {
		t.Errorf("a withdrawn call looked up with %d direct gets and %d message gets, want 1 and 2", direct, leader)
	}
}

// A calls stream set up before it allowed direct gets answers none (no
// one serves them): the look-up asks the leader, as it did, and stops
// trying direct gets on that connection.
func TestCallQueuedOnAStreamWithoutDirectGets(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	orch := bustest.Connect(t, srv, "orchestrator")
	bustest.Setup(t, orch)
	ctx := bustest.Context(t)
	st, err := orch.JetStream().Stream(ctx, wire.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := orch.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	worker := bustest.Connect(t, srv, "worker")
	gets := countGets(t, bustest.Connect(t, srv, "counter"), false)
	var seqs []uint64
	for _, id := range []string{"c1", "c2"} {
		a, err := orch.PublishCall(ctx, bustest.SampleCall("run1", id))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, a.Sequence)
	}
	for i, seq := range seqs {
		if ok, err := worker.CallQueued(ctx, seq); err != nil || !ok {
			t.Fatalf("looking up queued call %d: %v %v, want queued", i+1, ok, err)
		}
		if _, leader := gets.take(); leader != 1 {
			t.Errorf("queued call %d looked up with %d message gets, want 1", i+1, leader)
		}
	}
	if _, err := orch.WithdrawCalls(ctx, "weather", "run1", []string{"c2"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := worker.CallQueued(ctx, seqs[1]); err != nil || ok {
		t.Errorf("looking up a withdrawn call: %v %v, want gone", ok, err)
	}
}

// A direct get answered late (here: the stream answers none, and a
// listener on its subject keeps the server from saying no one does) sends
// that look-up to the leader, and only that one: a server busy for a
// moment does not leave every later look-up at the leader's cost.
func TestCallQueuedAfterALateDirectAnswer(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	orch := bustest.Connect(t, srv, "orchestrator")
	bustest.Setup(t, orch)
	ctx := bustest.Context(t)
	st, err := orch.JetStream().Stream(ctx, wire.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.AllowDirect = false
	if _, err := orch.JetStream().UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	worker := bustest.Connect(t, srv, "worker")
	gets := countGets(t, bustest.Connect(t, srv, "counter"), true)
	a, err := orch.PublishCall(ctx, bustest.SampleCall("run1", "c1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if ok, err := worker.CallQueued(ctx, a.Sequence); err != nil || !ok {
			t.Fatalf("look-up %d of a queued call: %v %v, want queued", i+1, ok, err)
		}
		if direct, leader := gets.take(); direct != 1 || leader != 1 {
			t.Errorf("look-up %d: %d direct gets and %d message gets, want 1 and 1", i+1, direct, leader)
		}
	}
}

// A worker user written before its role could send direct gets of the
// calls stream still looks calls up, through the stream's leader: a
// queued call is queued and a withdrawn one gone, with no permission error.
func TestCallQueuedForAUserWithoutDirectGets(t *testing.T) {
	t.Parallel()
	users := roleUsers(t)
	for i, u := range users {
		if u.Name == bus.RoleWorker {
			users[i].Permissions.Publish = slices.DeleteFunc(slices.Clone(u.Permissions.Publish), func(s string) bool { return s == directGetCalls })
		}
	}
	srv := bustest.StartServer(t, embedded.ServerConfig{Users: users})
	conn := func(role string) *bus.Bus { return roleConn(t, srv, role) }
	orch := conn(bus.RoleOrchestrator)
	bustest.Setup(t, orch)
	worker := conn(bus.RoleWorker)
	ctx := bustest.Context(t)
	call := bustest.SampleCall("run1", "c1")
	queued, err := orch.PublishCall(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ok, err := worker.CallQueued(ctx, queued.Sequence); err != nil || !ok {
			t.Fatalf("looking up a queued call: %v %v, want queued", ok, err)
		}
	}
	if _, err := orch.WithdrawCalls(ctx, call.ToolName, call.RunID, []string{call.ToolCallID}); err != nil {
		t.Fatal(err)
	}
	if ok, err := worker.CallQueued(ctx, queued.Sequence); err != nil || ok {
		t.Errorf("looking up a withdrawn call: %v %v, want gone", ok, err)
	}
}
