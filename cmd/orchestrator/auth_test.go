package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/cli/clitest"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

const authWait = 30 * time.Second

const usersYAML = `users:
  - {name: orch, password: orch-pw, role: orchestrator}
  - {name: worker-1, password: worker-pw, role: worker}
  - {name: bot, password: bot-pw, role: approver}
`

// lockedBuffer collects the command's log from its goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func loopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func noEnv(string) (string, bool) { return "", false }

// The orchestrator's embedded server with --nats-users admits only those
// users, each limited to its role: a worker and an approver connecting
// with their own credentials do their jobs (the seed conversation
// completes), but the worker cannot publish a decision, the approver
// cannot publish a result, and neither can connect without a password.
func TestNATSUsersPerRole(t *testing.T) {
	dir := t.TempDir()
	usersFile := filepath.Join(dir, "users.yaml")
	if err := os.WriteFile(usersFile, []byte(usersYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	natsAddr, httpAddr := loopbackAddr(t), loopbackAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var log lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{
			"--store", filepath.Join(dir, "data"), "--nats-listen", natsAddr, "--http", httpAddr,
			"--nats-users", usersFile, "--trust-approver", "bot=" + approver.EncodePublicKey(pub),
			"--shutdown-timeout", "5s",
		}, io.Discard, &log, noEnv)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("orchestrator: %v\n%s", err, log.String())
			}
		case <-time.After(authWait):
			t.Errorf("orchestrator did not stop")
		}
	})
	url := "nats://" + natsAddr
	connect := func(user, password string) (*bus.Bus, error) {
		cctx, ccancel := context.WithTimeout(context.Background(), authWait)
		defer ccancel()
		role := map[string]string{"worker-1": bus.RoleWorker, "bot": bus.RoleApprover}[user]
		return bus.Connect(cctx, bus.ConnConfig{URL: url, Name: user, User: user, Password: password, Role: role})
	}
	cl := &client.Client{BaseURL: "http://" + httpAddr}
	waitUntil(t, "the orchestrator to serve", func() bool {
		_, err := cl.Pending(context.Background())
		return err == nil
	}, &log)

	wb, err := connect("worker-1", "worker-pw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wb.Close)
	ab, err := connect("bot", "bot-pw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ab.Close)

	// Neither anonymous nor a wrong password gets in.
	for _, pw := range []string{"", "wrong"} {
		cctx, ccancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		b, err := bus.Connect(cctx, bus.ConnConfig{URL: url, User: "worker-1", Password: pw})
		ccancel()
		if err == nil {
			b.Close()
			t.Errorf("connected with password %q", pw)
		}
	}

	sandbox := filepath.Join(dir, "sandbox")
	bi, err := worker.NewBuiltin(sandbox)
	if err != nil {
		t.Fatal(err)
	}
	var tools []worker.Tool
	for _, s := range worker.BuiltinTools() {
		tools = append(tools, worker.Tool{Spec: s, Executor: bi, Kind: "builtin"})
	}
	w, err := worker.New(worker.Config{Bus: wb, Tools: tools, ID: "worker-1", DrainTimeout: 5 * time.Second, Advertise: true})
	if err != nil {
		t.Fatal(err)
	}
	policy, err := approver.ParsePolicy([]byte("rules:\n  - tool: delete_file\n    action: deny\n    message: no\n  - action: approve\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := approver.New(approver.Config{Bus: ab, ID: "bot", Policy: policy, Key: priv})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := w.Run(wctx); err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	wg.Go(func() {
		if err := a.Run(wctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("approver: %v", err)
		}
	})
	t.Cleanup(func() { wcancel(); wg.Wait() })

	rs, err := cl.StartRun(context.Background(), "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`", "")
	if err != nil {
		t.Fatal(err)
	}
	var conv *client.Conversation
	waitUntil(t, "the conversation to complete", func() bool {
		conv, err = cl.Conversation(context.Background(), rs.ConversationID)
		return err == nil && conv.Terminal()
	}, &log)
	if conv.Status != "completed" || !strings.Contains(string(conv.Output), "Hello, world!") {
		t.Fatalf("conversation %s: %s", conv.Status, conv.Error)
	}
	if got, err := os.ReadFile(filepath.Join(sandbox, "README.md")); err != nil || string(got) != "Hello, world!" {
		t.Errorf("README.md = %q, %v", got, err)
	}

	pctx, pcancel := context.WithTimeout(context.Background(), authWait)
	defer pcancel()
	run := conv.Runs[0].RunID
	dec := wire.Decision{RunID: run, ToolCallID: "delete_file", ArgsDigest: strings.Repeat("0", 64), Approved: true, ApproverID: "bot", DecidedAt: time.Now()}
	res := wire.CallReply{RunID: run, ToolCallID: "update_file_readme", Outcome: wire.OutcomeReturn, Value: []byte(`"forged"`), WorkerID: "bot"}
	if _, err := wb.PublishDecision(pctx, dec); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Errorf("worker publishing a decision: err = %v, want ErrPermissionDenied", err)
	}
	if _, err := ab.PublishCallReply(pctx, res); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Errorf("approver publishing a result: err = %v, want ErrPermissionDenied", err)
	}
	if _, err := wb.PublishCall(pctx, wire.CallRequest{RunID: run, ConversationID: conv.ConversationID, ToolCallID: "x", ToolName: "delete_file", Args: []byte(`{"path":"README.md"}`), Deadline: time.Now().Add(time.Minute)}); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Errorf("worker publishing a call: err = %v, want ErrPermissionDenied", err)
	}
	if _, err := ab.KeyValue(pctx, bus.BucketIndex); !errors.Is(err, bus.ErrPermissionDenied) {
		t.Errorf("approver opening the index bucket: err = %v, want ErrPermissionDenied", err)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool, log fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(authWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; log:\n%s", what, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// --write-nats-config writes the users as an authorization block that
// nats-server reads back with the subject lists of bus.RolePermissions, so
// a cluster's servers can be given the same users.
func TestWriteNATSConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	usersFile := filepath.Join(dir, "users.yaml")
	if err := os.WriteFile(usersFile, []byte(usersYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "auth.conf")
	var log lockedBuffer
	if err := run(context.Background(), []string{"--nats-users", usersFile, "--write-nats-config", out}, io.Discard, &log, noEnv); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(conf, []byte("port: -1\ninclude ./auth.conf\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		raw, _ := os.ReadFile(out)
		t.Fatalf("nats-server cannot read it: %v\n%s", err, raw)
	}
	roles := map[string]string{"orch": bus.RoleOrchestrator, "worker-1": bus.RoleWorker, "bot": bus.RoleApprover}
	if len(opts.Users) != len(roles) {
		t.Fatalf("%d users, want %d", len(opts.Users), len(roles))
	}
	for _, u := range opts.Users {
		want, err := bus.RolePermissions(roles[u.Username])
		if err != nil {
			t.Fatal(err)
		}
		if u.Permissions == nil || u.Permissions.Publish == nil || u.Permissions.Subscribe == nil {
			t.Fatalf("user %s: permissions %+v", u.Username, u.Permissions)
		}
		if !slices.Equal(u.Permissions.Publish.Allow, want.Publish) || !slices.Equal(u.Permissions.Subscribe.Allow, want.Subscribe) {
			t.Errorf("user %s: publish %v subscribe %v, want %v %v", u.Username,
				u.Permissions.Publish.Allow, u.Permissions.Subscribe.Allow, want.Publish, want.Subscribe)
		}
	}
}

func TestNATSAuthFlagsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("users.yaml", usersYAML)
	noOrch := write("no-orch.yaml", "users:\n  - {name: w, password: p, role: worker}\n")
	badRole := write("bad-role.yaml", "users:\n  - {name: w, password: p, role: admin}\n")
	noPassword := write("no-pw.yaml", "users:\n  - {name: w, role: worker}\n")
	twice := write("twice.yaml", "users:\n  - {name: w, password: p, role: worker}\n  - {name: w, password: q, role: approver}\n")
	unknown := write("unknown.yaml", "users:\n  - {name: w, password: p, role: worker, admin: true}\n")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"public nats without users", []string{"--nats-listen", "0.0.0.0:4222"}, "not loopback"},
		{"users with an external server", []string{"--nats", "nats://127.0.0.1:4222", "--nats-users", good}, "--nats-users configures the embedded server"},
		{"config without users", []string{"--write-nats-config", filepath.Join(dir, "x.conf")}, "needs --nats-users"},
		{"no orchestrator user", []string{"--nats-users", noOrch}, "no user with role orchestrator"},
		{"unknown orchestrator user", []string{"--nats-users", good, "--user", "bot"}, "no such orchestrator user"},
		{"unknown role", []string{"--nats-users", badRole}, `unknown role "admin"`},
		{"no password", []string{"--nats-users", noPassword}, "password is required"},
		{"listed twice", []string{"--nats-users", twice}, "listed twice"},
		{"unknown field", []string{"--nats-users", unknown}, `unknown field "admin"`},
		{"missing file", []string{"--nats-users", filepath.Join(dir, "nope.yaml")}, "no such file"},
		{"user without a server to use it on", []string{"--user", "orch"}, "--user needs --nats"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var log lockedBuffer
			args := append([]string{"--store", t.TempDir(), "--http", "127.0.0.1:0"}, tt.args...)
			err := run(context.Background(), args, io.Discard, &log, noEnv)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestHelpAndVersion(t *testing.T) {
	clitest.CheckHelp(t, "orchestrator", func(args []string, stdout *bytes.Buffer) error {
		return run(t.Context(), args, stdout, io.Discard, noEnv)
	}, "OPENAI_API_KEY", "TOOLGATE_NATS_PASSWORD", "OTEL_EXPORTER_OTLP_ENDPOINT")
}

// The agent and its model are named at start, and an OPENAI_API_KEY that
// an agent file does not use is said to be unused.
func TestAgentNamedAtStart(t *testing.T) {
	var log lockedBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	env := func(k string) (string, bool) {
		return map[string]string{"OPENAI_API_KEY": "k"}[k], k == "OPENAI_API_KEY"
	}
	if _, err := loadAgents([]string{"../../examples/agent-seed-approval.yaml"}, env, logger); err != nil {
		t.Fatal(err)
	}
	demo, err := loadAgents(nil, env, logger)
	if err != nil {
		t.Fatal(err)
	}
	if len(demo) != 1 || demo[0].Name != "demo" {
		t.Errorf("without --agent: %d agents, the first named %q; want the demo alone", len(demo), demo[0].Name)
	}
	for _, want := range []string{"msg=agent name=agent-seed-approval file=../../examples/agent-seed-approval.yaml digest=", "OPENAI_API_KEY is set but not used", `msg="agent: the built-in demo" provider=openai model=gpt-4o-mini`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
	}
}

// --agent repeats: each file or directory adds its agents, all of them
// run by the one orchestrator.
func TestAgentFlagRepeats(t *testing.T) {
	o, err := parseFlags([]string{"--agent", "../../examples/agent-seed-approval.yaml", "--agent", "../../examples/agent-seed-external.yaml"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := loadAgents(o.agentFiles, noEnv, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfgs) != 2 || cfgs[0].Name != "agent-seed-approval" || cfgs[1].Name != "agent-seed-external" {
		t.Errorf("agents %d: %+v", len(cfgs), cfgs)
	}
	o, err = parseFlags([]string{"--agent", "../../examples/agent-seed-approval.yaml", "--agent", "../../examples/agent-seed-approval.yaml"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadAgents(o.agentFiles, noEnv, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), `both name an agent "agent-seed-approval"`) {
		t.Errorf("the same file twice: %v", err)
	}
}
