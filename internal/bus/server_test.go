package bus_test

import (
	"context"
	"encoding/json"
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

func TestStoreDirLockRefusesSecondServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv, err := embedded.StartServer(embedded.ServerConfig{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = embedded.StartServer(embedded.ServerConfig{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if !errors.Is(err, embedded.ErrStoreDirLocked) || !strings.Contains(err.Error(), dir) {
		t.Errorf("second server: err = %v, want ErrStoreDirLocked naming %s", err, dir)
	}
	srv.Shutdown()
	// Released on shutdown.
	srv2, err := embedded.StartServer(embedded.ServerConfig{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatalf("after shutdown: %v", err)
	}
	srv2.Shutdown()
}

func TestServerStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := embedded.ServerConfig{StoreDir: dir, NoListen: true, SyncAlways: true}
	srv, err := embedded.StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := srv.Connect(bustest.Context(t), bus.ConnConfig{})
	if err != nil {
		t.Fatal(err)
	}
	bustest.Setup(t, b)
	if _, err := b.PublishCall(bustest.Context(t), bustest.SampleCall("run1", "c1")); err != nil {
		t.Fatal(err)
	}
	b.Close()
	srv.Shutdown()

	srv = startServerCfg(t, cfg)
	b = bustest.ConnectConfig(t, srv, bus.ConnConfig{})
	if n := bustest.StreamMsgs(t, b, wire.StreamCalls); n != 1 {
		t.Errorf("after restart the calls stream holds %d messages, want 1", n)
	}
}

func startServerCfg(t *testing.T, cfg embedded.ServerConfig) *embedded.Server {
	t.Helper()
	return bustest.StartServer(t, cfg)
}

func TestStartServerConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  embedded.ServerConfig
		want string
	}{
		{"no store dir", embedded.ServerConfig{}, "store dir is required"},
		{"bad listen", embedded.ServerConfig{StoreDir: t.TempDir(), Listen: "nope"}, "listen address"},
		{"bad port", embedded.ServerConfig{StoreDir: t.TempDir(), Listen: "127.0.0.1:x"}, "bad port"},
		{"nameless user", embedded.ServerConfig{StoreDir: t.TempDir(), Users: []bus.User{{Password: "p"}}}, "no name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := embedded.StartServer(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestSetupIdempotent(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	b := bustest.ConnectConfig(t, srv, bus.ConnConfig{})
	ctx := bustest.Context(t)
	if err := b.Setup(ctx, bus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	if err := b.Setup(ctx, bus.SetupConfig{}); err != nil {
		t.Fatalf("second setup: %v", err)
	}
	if _, err := b.PublishCall(ctx, bustest.SampleCall("run1", "c1")); err != nil {
		t.Fatal(err)
	}
	// A changed bound is applied in place; data stays.
	if err := b.Setup(ctx, bus.SetupConfig{CallsMaxMsgs: 2, EventsMaxAge: time.Hour}); err != nil {
		t.Fatalf("setup with changed bound: %v", err)
	}
	st, err := b.JetStream().Stream(ctx, wire.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.MaxMsgs != 2 || info.Config.Retention != jetstream.WorkQueuePolicy || info.Config.Discard != jetstream.DiscardNew {
		t.Errorf("calls config: max %d retention %v discard %v", info.Config.MaxMsgs, info.Config.Retention, info.Config.Discard)
	}
	if info.State.Msgs != 1 {
		t.Errorf("calls stream lost its message: %d", info.State.Msgs)
	}
	// The bound refuses overload instead of dropping old calls.
	if _, err := b.PublishCall(ctx, bustest.SampleCall("run1", "c2")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishCall(ctx, bustest.SampleCall("run1", "c3")); err == nil {
		t.Error("publish beyond CallsMaxMsgs succeeded")
	}
	for _, name := range []string{wire.StreamApprovals, wire.StreamReplies, wire.StreamEvents, wire.StreamDLQ, wire.StreamAudit, wire.StreamAdvisories} {
		if _, err := b.JetStream().Stream(ctx, name); err != nil {
			t.Errorf("stream %s: %v", name, err)
		}
	}
	index, err := b.KeyValue(ctx, bus.BucketIndex)
	if err != nil {
		t.Fatal(err)
	}
	if index.Bucket() != bus.BucketIndex {
		t.Errorf("bucket %s", index.Bucket())
	}
	if _, err := b.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Setup(ctx, bus.SetupConfig{DuplicateWindow: time.Hour, EventsMaxAge: time.Minute}); err == nil {
		t.Error("setup accepted a max age shorter than the duplicate window")
	}
}

func TestConnectWaitsForServerAndFailsOnContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := bus.Connect(ctx, bus.ConnConfig{URL: "nats://127.0.0.1:1"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want deadline exceeded", err)
	}
}

func TestRolePermissions(t *testing.T) {
	t.Parallel()
	users := roleUsers(t)
	if _, err := bus.RolePermissions("intruder"); err == nil {
		t.Error("unknown role accepted")
	}
	srv := bustest.StartServer(t, embedded.ServerConfig{Users: users})
	conn := func(role string) *bus.Bus { return roleConn(t, srv, role) }
	orch := conn(bus.RoleOrchestrator)
	bustest.Setup(t, orch)
	worker := conn(bus.RoleWorker)
	approver := conn(bus.RoleApprover)
	ctx := bustest.Context(t)

	// What each role is for works.
	if _, err := worker.PublishCallReply(ctx, bustest.SampleReply("run1", "c1")); err != nil {
		t.Errorf("worker publishing a result: %v", err)
	}
	if _, err := approver.PublishDecision(ctx, bustest.SampleDecision("run1", "c2")); err != nil {
		t.Errorf("approver publishing a decision: %v", err)
	}
	if _, err := orch.PublishCall(ctx, bustest.SampleCall("run1", "c3")); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	s, err := worker.ConsumeCalls(ctx, "weather", bus.ConsumeConfig{}, bus.HandlerFunc[wire.CallRequest](
		func(_ context.Context, d *bus.Delivery[wire.CallRequest]) error { got <- d.Msg.ToolCallID; return nil }))
	if err != nil {
		t.Fatalf("worker consuming calls: %v", err)
	}
	stop(t, s)
	if id := bustest.Recv(t, got, "call at worker"); id != "c3" {
		t.Errorf("worker got %s", id)
	}
	// A worker looks a call up before running it; one the orchestrator
	// withdrew is gone.
	unserved := bustest.SampleCall("run1", "c4")
	unserved.ToolName = "forecast"
	queued, err := orch.PublishCall(ctx, unserved)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := worker.CallQueued(ctx, queued.Sequence); err != nil || !ok {
		t.Errorf("worker looking up a queued call: %v %v, want queued", ok, err)
	}
	if n, err := orch.WithdrawCalls(ctx, "forecast", "run1", []string{"c4"}); err != nil || n != 1 {
		t.Errorf("withdrawing a queued call: %d %v, want 1 withdrawn", n, err)
	}
	if ok, err := worker.CallQueued(ctx, queued.Sequence); err != nil || ok {
		t.Errorf("worker looking up a withdrawn call: %v %v, want gone", ok, err)
	}
	// A sequence the stream has not stored yet (a call delivered by a
	// consumer whose node is ahead of the stream's leader) is not taken
	// for a withdrawn call.
	if ok, err := worker.CallQueued(ctx, queued.Sequence+100); err != nil || !ok {
		t.Errorf("worker looking up a call beyond the stream's last sequence: %v %v, want queued", ok, err)
	}
	if _, err := approver.CallQueued(ctx, queued.Sequence); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Errorf("approver looking up a call: %v, want ErrPermissionDenied", err)
	}
	as, err := approver.ConsumeApprovals(ctx, "bot", "", bus.ConsumeConfig{}, bus.HandlerFunc[wire.ApprovalRequest](
		func(context.Context, *bus.Delivery[wire.ApprovalRequest]) error { return nil }))
	if err != nil {
		t.Fatalf("approver consuming approvals: %v", err)
	}
	stop(t, as)

	tools, err := worker.Tools(ctx)
	if err != nil {
		t.Fatalf("worker opening the tools bucket: %v", err)
	}
	if _, err := tools.Put(ctx, "weather", []byte(`{"name":"weather"}`)); err != nil {
		t.Errorf("worker advertising a tool: %v", err)
	}
	// Reading an advert back: a request the server refuses gets no answer,
	// so a refused Get would only end with its context.
	gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
	if e, err := tools.Get(gctx, "weather"); err != nil {
		t.Errorf("worker reading a tool advert: %v", err)
	} else if string(e.Value) != `{"name":"weather"}` {
		t.Errorf("worker read advert %s", e.Value)
	}
	gcancel()
	// The approval inbox reads it too, for the MCP server a tool comes from.
	atools, err := approver.Tools(ctx)
	if err != nil {
		t.Fatalf("approver opening the tools bucket: %v", err)
	}
	gctx, gcancel = context.WithTimeout(ctx, 5*time.Second)
	if _, err := atools.Get(gctx, "weather"); err != nil {
		t.Errorf("approver reading a tool advert: %v", err)
	}
	gcancel()
	if _, err := worker.KeyValue(ctx, bus.BucketIndex); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Errorf("worker opening the index bucket: err = %v, want ErrPermissionDenied", err)
	}

	// What they must not do fails, and nothing reaches the stream.
	before := bustest.StreamMsgs(t, orch, wire.StreamReplies)
	if _, err := worker.PublishDecision(ctx, bustest.SampleDecision("run1", "c9")); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Errorf("worker publishing a decision: err = %v, want ErrPermissionDenied", err)
	}
	if _, err := approver.PublishCallReply(ctx, bustest.SampleReply("run1", "c9")); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Errorf("approver publishing a result: err = %v, want ErrPermissionDenied", err)
	}
	if _, err := worker.PublishCall(ctx, bustest.SampleCall("run1", "c9")); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Errorf("worker publishing a call: err = %v, want ErrPermissionDenied", err)
	}
	if _, err := worker.ConsumeReplies(ctx, "sneaky", bus.ConsumeConfig{}, bus.HandlerFunc[bus.Reply](
		func(context.Context, *bus.Delivery[bus.Reply]) error { return nil })); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Errorf("worker consuming replies: err = %v, want ErrPermissionDenied", err)
	}
	if err := worker.Setup(ctx, bus.SetupConfig{}); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Errorf("worker setting up streams: err = %v, want ErrPermissionDenied", err)
	}
	if n := bustest.StreamMsgs(t, orch, wire.StreamReplies); n != before {
		t.Errorf("replies grew from %d to %d", before, n)
	}
	// Core NATS reports the violation on the connection.
	if err := worker.Conn().Publish("toolgate.reply.run1.approval", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := worker.Conn().FlushTimeout(wait); err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, "permission violation", func() bool {
		return errors.Is(worker.Conn().LastError(), nats.ErrPermissionViolation)
	})
}

// A worker's or an approver's user cannot subscribe to the inboxes of
// another role: with one shared prefix, a worker's credentials received the
// KV values the orchestrator read (prompts, history, args, results).
func TestRolesCannotReadOtherInboxes(t *testing.T) {
	t.Parallel()
	users := roleUsers(t)
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true, Users: users})
	orch := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "orch", User: bus.RoleOrchestrator, Password: bus.RoleOrchestrator + "-pw", Role: bus.RoleOrchestrator})
	bustest.Setup(t, orch)
	ctx := bustest.Context(t)
	index, err := orch.KeyValue(ctx, bus.BucketIndex)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := index.Put(ctx, "conv1", []byte("secret prompt")); err != nil {
		t.Fatal(err)
	}
	// Another worker's and approver's replies too: a role's users share a
	// prefix, but no role reads another's.
	others := map[string][]string{
		bus.RoleWorker:   {"_INBOX.>", bus.InboxPrefix(bus.RoleApprover) + ".>", ">"},
		bus.RoleApprover: {"_INBOX.>", bus.InboxPrefix(bus.RoleWorker) + ".>", ">"},
	}
	for role, subjects := range others {
		for _, subj := range subjects {
			violations := make(chan error, 4)
			nc, err := nats.Connect("", nats.InProcessServer(srv.NATSServer()), nats.UserInfo(role, role+"-pw"),
				nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
					if errors.Is(err, nats.ErrPermissionViolation) {
						select {
						case violations <- err:
						default:
						}
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *nats.Msg, 16)
			if _, err := nc.ChanSubscribe(subj, got); err != nil {
				t.Fatal(err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			// The orchestrator keeps reading until the spy's subscription is
			// refused or something reaches it.
		read:
			for {
				if _, err := index.Get(ctx, "conv1"); err != nil {
					t.Fatal(err)
				}
				select {
				case m := <-got:
					t.Errorf("%s subscribed to %s received %s: %q", role, subj, m.Subject, m.Data)
					break read
				case <-violations:
					break read
				case <-ctx.Done():
					t.Fatalf("%s subscribing to %s: neither refused nor received anything", role, subj)
				default:
				}
			}
			nc.Close()
		}
	}
	// Each role still works under its own prefix (the components' tests run
	// under their roles too): a worker reads the tools bucket through it.
	worker := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "w", User: bus.RoleWorker, Password: bus.RoleWorker + "-pw", Role: bus.RoleWorker})
	tools, err := worker.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tools.Put(ctx, "echo", []byte(`{"name":"echo"}`)); err != nil {
		t.Fatal(err)
	}
}

// roleUsers is one user per role, named after it, with password <role>-pw.
func roleUsers(t *testing.T) []bus.User {
	t.Helper()
	var users []bus.User
	for _, role := range []string{bus.RoleOrchestrator, bus.RoleWorker, bus.RoleApprover} {
		p, err := bus.RolePermissions(role)
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, bus.User{Name: role, Password: role + "-pw", Permissions: p})
	}
	return users
}

// roleConn is a connection of role's user (roleUsers) to srv.
func roleConn(t *testing.T, srv *embedded.Server, role string) *bus.Bus {
	t.Helper()
	return bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: role, User: role, Password: role + "-pw", Role: role})
}

func TestStartServerRefusesBusyPortAtOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = embedded.StartServer(embedded.ServerConfig{StoreDir: t.TempDir(), Listen: ln.Addr().String(), ReadyTimeout: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("err = %v, want address already in use", err)
	}
}

func TestConnectNamesTheURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"http://127.0.0.1:4222", "nats://:x", "nats://", "nats//host", "nats://h:99999"} {
		_, err := bus.Connect(t.Context(), bus.ConnConfig{URL: u})
		if err == nil || !strings.Contains(err.Error(), "NATS URL") {
			t.Errorf("Connect(%q) = %v, want a refusal at once", u, err)
		}
	}
	var logs strings.Builder
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := bus.Connect(ctx, bus.ConnConfig{URL: "nats://bob:secret@127.0.0.1:1", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil || !strings.Contains(err.Error(), "nats://bob:xxxxx@127.0.0.1:1") || !strings.Contains(err.Error(), "no server answered") {
		t.Errorf("err = %v, want one naming the URL (password hidden) and why", err)
	}
	if !strings.Contains(logs.String(), "connecting to NATS") || strings.Contains(logs.String(), "secret") {
		t.Errorf("log = %q, want a connecting line without the password", logs.String())
	}
}

// An approver's credentials cannot delete a consumer of the approvals
// stream (another bot's durable: before, any approver could, and the
// victim decided nothing more); a bot whose durable is deleted anyway (by
// an operator) makes it again and goes on receiving requests.
func TestApproverConsumerCannotBeDeletedAndComesBack(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true, Users: roleUsers(t)})
	conn := func(role string) *bus.Bus {
		return bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: role, User: role, Password: role + "-pw", Role: role, Logger: testLogger(t)})
	}
	orch := conn(bus.RoleOrchestrator)
	bustest.Setup(t, orch)
	bot, mallory := conn(bus.RoleApprover), conn(bus.RoleApprover)
	got := make(chan string, 16)
	sub, err := bot.ConsumeApprovals(ctxT(t), "bot-a", "", bus.ConsumeConfig{}, bus.HandlerFunc[wire.ApprovalRequest](
		func(_ context.Context, d *bus.Delivery[wire.ApprovalRequest]) error {
			got <- d.Msg.ToolCallID
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, sub) })

	ctx, cancel := context.WithTimeout(ctxT(t), 3*time.Second)
	err = mallory.JetStream().DeleteConsumer(ctx, wire.StreamApprovals, "bot-a")
	cancel()
	if err == nil {
		t.Fatal("an approver deleted another approver's consumer")
	}
	if _, err := orch.JetStream().Consumer(ctxT(t), wire.StreamApprovals, "bot-a"); err != nil {
		t.Fatalf("bot-a's consumer after the refused delete: %v", err)
	}
	request := func(call string) wire.ApprovalRequest {
		args := json.RawMessage(`{"path":"x"}`)
		d, err := wire.DigestArgs(args)
		if err != nil {
			t.Fatal(err)
		}
		return wire.ApprovalRequest{RunID: "run1", ConversationID: "conv1", ToolCallID: call, ToolName: "delete_file",
			Parameters: json.RawMessage(`{"type":"object"}`), Args: args, ArgsDigest: d, Deadline: time.Now().Add(time.Hour)}
	}
	if _, err := orch.PublishApproval(ctxT(t), request("before")); err != nil {
		t.Fatal(err)
	}
	if id := bustest.Recv(t, got, "the first request"); id != "before" {
		t.Fatalf("got %s", id)
	}

	if err := orch.JetStream().DeleteConsumer(ctxT(t), wire.StreamApprovals, "bot-a"); err != nil {
		t.Fatal(err)
	}
	bustest.Poll(t, bustest.Timeout, "bot-a's consumer made again", func() (bool, string) {
		_, err := orch.JetStream().Consumer(ctxT(t), wire.StreamApprovals, "bot-a")
		return err == nil, fmt.Sprint(err)
	})
	if _, err := orch.PublishApproval(ctxT(t), request("after")); err != nil {
		t.Fatal(err)
	}
	// The new durable starts from the stream's first request again.
	for {
		if id := bustest.Recv(t, got, "a request after the delete"); id == "after" {
			return
		}
	}
}

// The JavaScript clients (nats, @nats-io/jetstream) create a consumer with
// a list of filters, as an ordered consumer on the events often has, by
// the nameless $JS.API.CONSUMER.CREATE.<stream>, the name in the body: an
// approver may do that on the events stream (before, its bot never saw an
// event), not on the approvals stream, where names in the body would get
// past the deny list of other approvers' durables. With one filter given
// as a string they send name and filter in the subject, which an approver
// may use on both.
func TestApproverNamelessConsumerCreate(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true, Users: roleUsers(t)})
	conn := func(role string) *bus.Bus {
		return bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: role, User: role, Password: role + "-pw", Role: role, Logger: testLogger(t)})
	}
	orch := conn(bus.RoleOrchestrator)
	bustest.Setup(t, orch)
	bot := conn(bus.RoleApprover)
	for _, tc := range []struct {
		name, stream, filter string
		inSubject            bool
		allowed              bool
	}{
		{name: "events", stream: wire.StreamEvents, filter: wire.PrefixEvent + ".>", allowed: true},
		{name: "approvals", stream: wire.StreamApprovals, filter: wire.PrefixApproval + ".>"},
		{name: "approvals-filter-in-subject", stream: wire.StreamApprovals, filter: wire.PrefixApproval + ".>", inSubject: true, allowed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "oc_" + tc.name + "_1"
			// What nats.js sends for js.consumers.get(stream, {filter_subjects: [...]})
			// (a list: nameless) or {filter_subjects: "..."} (a string).
			cfg := map[string]any{
				"name": name, "deliver_policy": "new", "ack_policy": "none", "max_deliver": 1,
				"mem_storage": true, "num_replicas": 1, "inactive_threshold": int64(5 * time.Minute),
			}
			subject := "$JS.API.CONSUMER.CREATE." + tc.stream
			if tc.inSubject {
				cfg["filter_subject"] = tc.filter
				subject += "." + name + "." + tc.filter
			} else {
				cfg["filter_subjects"] = []string{tc.filter}
			}
			req, err := json.Marshal(map[string]any{"stream_name": tc.stream, "config": cfg})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(ctxT(t), 3*time.Second)
			defer cancel()
			msg, err := bot.Conn().RequestWithContext(ctx, subject, req)
			_, infoErr := orch.JetStream().Consumer(ctxT(t), tc.stream, name)
			if !tc.allowed {
				if err == nil || infoErr == nil {
					t.Errorf("an approver made a consumer of %s by %s (request: %v, consumer: %v)", tc.stream, subject, err, infoErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", subject, err)
			}
			var resp struct {
				Error *struct{ Description string } `json:"error"`
			}
			if err := json.Unmarshal(msg.Data, &resp); err != nil || resp.Error != nil || infoErr != nil {
				t.Errorf("%s: %s (%v, consumer: %v)", subject, msg.Data, err, infoErr)
			}
		})
	}
}
