package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/bus/usersfile"
	"github.com/toolgate/toolgate/wire"
)

const guardUsers = `
users:
  - {name: orch, password: orch-pw, role: orchestrator}
  - {name: w1, password: w1-pw, role: worker}
  - {name: w2, password: w2-pw, role: worker}
  - {name: policybot, password: policybot-pw, role: approver}
  - {name: mallory, password: mallory-pw, role: approver}
`

// guardServer is a server with the users of guardUsers, set up, and a
// connection per user.
func guardServer(t *testing.T) map[string]*bus.Bus {
	t.Helper()
	users, err := usersfile.Parse([]byte(guardUsers))
	if err != nil {
		t.Fatal(err)
	}
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true, Users: users})
	conns := map[string]*bus.Bus{}
	for _, u := range users {
		conns[u.Name] = bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: u.Name, User: u.Name, Password: u.Password, Role: u.Role, Logger: testLogger(t)})
	}
	bustest.Setup(t, conns["orch"])
	return conns
}

// edits are the ways a client may try to change another's consumer: the
// update and create-or-update calls of nats.go (the NATS CLI's "consumer
// edit" sends the same request).
func edits(js jetstream.JetStream, stream string, cfg jetstream.ConsumerConfig) map[string]func(context.Context) error {
	return map[string]func(context.Context) error{
		"UpdateConsumer": func(ctx context.Context) error {
			_, err := js.UpdateConsumer(ctx, stream, cfg)
			return err
		},
		"CreateOrUpdateConsumer": func(ctx context.Context) error {
			_, err := js.CreateOrUpdateConsumer(ctx, stream, cfg)
			return err
		},
	}
}

// An approver user cannot change another approver's durable, nor a worker
// the call_<tool> durable every worker shares (the filter edited to
// nothing silenced a bot, or a tool, without a word); each still runs its
// own.
func TestRolesCannotEditConsumersNotTheirs(t *testing.T) {
	t.Parallel()
	c := guardServer(t)
	orch := c["orch"]

	// The bot's own durable, and the one mallory may run.
	got := make(chan string, 16)
	handler := func(who string) bus.Handler[wire.ApprovalRequest] {
		return bus.HandlerFunc[wire.ApprovalRequest](func(_ context.Context, d *bus.Delivery[wire.ApprovalRequest]) error {
			got <- who + ":" + d.Msg.ToolCallID
			return nil
		})
	}
	for _, who := range []string{"policybot", "mallory"} {
		sub, err := c[who].ConsumeApprovals(ctxT(t), who, "", bus.ConsumeConfig{}, handler(who))
		if err != nil {
			t.Fatalf("%s consumes its own durable: %v", who, err)
		}
		stop(t, sub)
	}
	botCfg, err := orch.JetStream().Consumer(ctxT(t), wire.StreamApprovals, "policybot")
	if err != nil {
		t.Fatal(err)
	}
	silenced := botCfg.CachedInfo().Config
	silenced.FilterSubject = "toolgate.approval.nothing"
	for name, edit := range edits(c["mallory"].JetStream(), wire.StreamApprovals, silenced) {
		ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Second)
		if err := edit(ctx); err == nil {
			t.Errorf("mallory's %s of policybot's durable succeeded", name)
		}
		cancel()
	}
	// Nor may it make the bot's inbox durable before the bot does.
	ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Second)
	_, err = c["mallory"].JetStream().CreateConsumer(ctx, wire.StreamApprovals, jetstream.ConsumerConfig{Durable: "policybot-inbox", AckPolicy: jetstream.AckExplicitPolicy})
	cancel()
	if err == nil {
		t.Error("mallory made policybot-inbox")
	}
	if info, err := orch.JetStream().Consumer(ctxT(t), wire.StreamApprovals, "policybot"); err != nil || info.CachedInfo().Config.FilterSubject != wire.AllApprovals {
		t.Fatalf("policybot's durable after the refused edits: %+v, %v", info, err)
	}
	args := json.RawMessage(`{}`)
	digest, _ := wire.DigestArgs(args)
	if _, err := orch.PublishApproval(ctxT(t), wire.ApprovalRequest{RunID: "run1", ConversationID: "conv1", ToolCallID: "a1", ToolName: "pay",
		Args: args, ArgsDigest: digest, Deadline: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < 2 {
		seen[bustest.Recv(t, got, "the request at both approvers")] = true
	}
	if !seen["policybot:a1"] || !seen["mallory:a1"] {
		t.Errorf("seen %v, want a1 at policybot and mallory", seen)
	}

	// Workers bind to the call durable the orchestrator makes.
	if _, err := c["w1"].ConsumeCalls(ctxT(t), "other", bus.ConsumeConfig{}, bus.HandlerFunc[wire.CallRequest](
		func(context.Context, *bus.Delivery[wire.CallRequest]) error { return nil })); !errors.Is(err, bus.ErrConsumerMissing) || !bus.Transient(err) {
		t.Errorf("a worker's consume of a tool without call consumer = %v, want ErrConsumerMissing, transient", err)
	}
	if err := orch.EnsureCallConsumer(ctxT(t), "echo"); err != nil {
		t.Fatal(err)
	}
	calls := make(chan string, 4)
	sub, err := c["w1"].ConsumeCalls(ctxT(t), "echo", bus.ConsumeConfig{}, bus.HandlerFunc[wire.CallRequest](
		func(_ context.Context, d *bus.Delivery[wire.CallRequest]) error {
			calls <- d.Msg.ToolCallID
			return nil
		}))
	if err != nil {
		t.Fatalf("w1 consumes call_echo: %v", err)
	}
	stop(t, sub)
	want, err := bus.CallConsumerConfig("echo")
	if err != nil {
		t.Fatal(err)
	}
	broken := want
	broken.FilterSubject = "toolgate.call.nothing"
	for name, edit := range edits(c["w2"].JetStream(), wire.StreamCalls, broken) {
		ctx, cancel := context.WithTimeout(ctxT(t), 2*time.Second)
		if err := edit(ctx); err == nil {
			t.Errorf("w2's %s of call_echo succeeded", name)
		}
		cancel()
	}
	if _, err := orch.PublishCall(ctxT(t), wire.CallRequest{RunID: "run1", ConversationID: "conv1", ToolCallID: "e1", ToolName: "echo",
		Args: args, Deadline: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if id := bustest.Recv(t, calls, "the call at w1"); id != "e1" {
		t.Errorf("w1 got %s, want e1", id)
	}
}

// driftLog collects the error records of a logger.
type driftLog struct {
	mu      sync.Mutex
	records []string
}

func (l *driftLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, string(p))
	return len(p), nil
}

func (l *driftLog) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records {
		if strings.Contains(r, "level=ERROR") && strings.Contains(r, s) {
			return true
		}
	}
	return false
}

// A durable whose configuration another client changes while it is
// consumed (an operator, or a user with the rights) is told loudly and put
// back by its owner, and what it skipped while its filter was changed is
// handed to its handler after all.
func TestConsumerChangedUnderneathIsToldAndPutBack(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true})
	logs := &driftLog{}
	b := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "bot", Logger: slogText(logs)})
	bustest.Setup(t, b)
	other := bustest.Connect(t, srv, "other")
	drifts := make(chan bus.ConsumerDrift, 4)
	got := make(chan string, 16)
	// Checks far enough apart that the request published right after the
	// edit is skipped by the edited consumer before the check puts it back.
	cfg := bus.ConsumeConfig{CheckEvery: 300 * time.Millisecond, OnDrift: func(d bus.ConsumerDrift) { drifts <- d }}
	sub, err := b.ConsumeApprovals(ctxT(t), "bot", "", cfg,
		bus.HandlerFunc[wire.ApprovalRequest](func(_ context.Context, d *bus.Delivery[wire.ApprovalRequest]) error {
			got <- d.Msg.ToolCallID
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	stop(t, sub)
	request := func(call string) wire.ApprovalRequest {
		args := json.RawMessage(`{}`)
		digest, _ := wire.DigestArgs(args)
		return wire.ApprovalRequest{RunID: "run1", ConversationID: "conv1", ToolCallID: call, ToolName: "pay",
			Args: args, ArgsDigest: digest, Deadline: time.Now().Add(time.Hour)}
	}
	if _, err := other.PublishApproval(ctxT(t), request("before")); err != nil {
		t.Fatal(err)
	}
	if id := bustest.Recv(t, got, "the first request"); id != "before" {
		t.Fatalf("got %s, want before", id)
	}

	cons, err := other.JetStream().Consumer(ctxT(t), wire.StreamApprovals, "bot")
	if err != nil {
		t.Fatal(err)
	}
	edited := cons.CachedInfo().Config
	edited.FilterSubject = "toolgate.approval.nothing"
	if _, err := other.JetStream().UpdateConsumer(ctxT(t), wire.StreamApprovals, edited); err != nil {
		t.Fatal(err)
	}
	if _, err := other.PublishApproval(ctxT(t), request("during")); err != nil {
		t.Fatal(err)
	}
	// A request the edited filter takes: the server moves the consumer's
	// place past "during" to deliver it, so "during" is skipped for good
	// unless the subscription reads it again.
	bait := request("bait")
	bait.ToolName = "nothing"
	if _, err := other.PublishApproval(ctxT(t), bait); err != nil {
		t.Fatal(err)
	}
	if id := bustest.Recv(t, got, "the request the edited filter takes"); id != "bait" {
		t.Fatalf("got %s, want bait", id)
	}
	d := bustest.Recv(t, drifts, "the drift told")
	if !d.Restored || d.Consumer != "bot" || !strings.Contains(d.String(), "toolgate.approval.nothing") || d.ReplayErr != nil {
		t.Errorf("drift = %+v, want bot's filter change, put back", d)
	}
	bustest.WaitFor(t, "an error record of the change", func() bool { return logs.has("changed by another client") })
	if b.ConsumerDrifts() < 1 {
		t.Errorf("ConsumerDrifts = %d, want at least 1", b.ConsumerDrifts())
	}
	bustest.WaitFor(t, "the filter put back", func() bool {
		c, err := other.JetStream().Consumer(ctxT(t), wire.StreamApprovals, "bot")
		return err == nil && c.CachedInfo().Config.FilterSubject == wire.AllApprovals
	})
	for {
		if id := bustest.Recv(t, got, "the request published while the filter was changed"); id == "during" {
			break
		}
	}
	t.Logf("replayed %d", d.Replayed)
}

func slogText(w *driftLog) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// The authorization block for a cluster's servers denies each approver
// user the others' durables, as the embedded server does.
func TestServerConfigBlockDeniesOtherApproversDurables(t *testing.T) {
	t.Parallel()
	users, err := usersfile.Parse([]byte(guardUsers + "  - {name: ops, password: ops-pw, role: approver, consumers: [ops-bot]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(t.TempDir(), "server.conf")
	if err := os.WriteFile(conf, []byte("port: -1\n"+bus.ServerConfigBlock(users)), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server cannot read it: %v", err)
	}
	deny := map[string][]string{}
	for _, u := range opts.Users {
		if u.Permissions != nil && u.Permissions.Publish != nil {
			deny[u.Username] = u.Permissions.Publish.Deny
		}
	}
	if want := bus.ApproverDeny(append(bus.ApproverConsumers("policybot"), "ops-bot")); !slices.Equal(deny["mallory"], want) {
		t.Errorf("mallory's publish deny = %v, want %v", deny["mallory"], want)
	}
	if slices.Contains(deny["ops"], "$JS.API.CONSUMER.CREATE."+wire.StreamApprovals+".ops-bot") || !slices.Contains(deny["ops"], "$JS.API.CONSUMER.CREATE."+wire.StreamApprovals+".mallory") {
		t.Errorf("ops's publish deny = %v, want the others' durables, not its own", deny["ops"])
	}
	if len(deny["w1"]) != 0 || len(deny["orch"]) != 0 {
		t.Errorf("deny lists of a worker %v and the orchestrator %v, want none", deny["w1"], deny["orch"])
	}
}

// toolgate's own durables, as made, match what their subscriptions expect
// (the comparison the periodic check makes too): a second subscription
// binds to each without updating it, and no drift is counted.
func TestOwnConsumersHaveNoDrift(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true})
	logs := &driftLog{}
	b := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "test", Logger: slogText(logs)})
	bustest.Setup(t, b)
	cfg := bus.ConsumeConfig{CheckEvery: 10 * time.Millisecond}
	for range 2 {
		calls, err := b.ConsumeCalls(ctxT(t), "echo", cfg, bus.HandlerFunc[wire.CallRequest](func(context.Context, *bus.Delivery[wire.CallRequest]) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		stop(t, calls)
		approvals, err := b.ConsumeApprovals(ctxT(t), "bot", "toolgate.approval.pay", cfg, bus.HandlerFunc[wire.ApprovalRequest](func(context.Context, *bus.Delivery[wire.ApprovalRequest]) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		stop(t, approvals)
		replies, err := b.ConsumeReplies(ctxT(t), "orch", cfg, bus.HandlerFunc[bus.Reply](func(context.Context, *bus.Delivery[bus.Reply]) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		stop(t, replies)
	}
	// Made by the orchestrator's publication, bound by a worker.
	if err := b.EnsureCallConsumer(ctxT(t), "other"); err != nil {
		t.Fatal(err)
	}
	other, err := b.ConsumeCalls(ctxT(t), "other", cfg, bus.HandlerFunc[wire.CallRequest](func(context.Context, *bus.Delivery[wire.CallRequest]) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	stop(t, other)
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, r := range logs.records {
		if strings.Contains(r, "consumer configuration") {
			t.Errorf("log: %s", r)
		}
	}
	if n := b.ConsumerDrifts(); n != 0 {
		t.Errorf("ConsumerDrifts = %d, want 0", n)
	}
}
