package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/cli/clitest"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
	"github.com/toolgate/toolgate/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer is a log sink safe for the worker's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunServesCallsUntilCancelled(t *testing.T) {
	srv := bustest.NewServer(t)
	b := bustest.Connect(t, srv, "test")
	bustest.Setup(t, b)

	replies := make(chan wire.CallReply, 4)
	sub, err := b.ConsumeReplies(t.Context(), "test", bus.ConsumeConfig{}, bus.HandlerFunc[bus.Reply](
		func(_ context.Context, d *bus.Delivery[bus.Reply]) error {
			if d.Msg.Call != nil {
				replies <- *d.Msg.Call
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop(context.Background()) })

	sandbox := t.TempDir()
	script := filepath.Join(t.TempDir(), "shout.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho '\"HEY\"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	var exited atomic.Bool
	stop := bustest.Run(t, "tool-worker", func(ctx context.Context) error {
		defer exited.Store(true)
		return run(ctx, []string{
			"--nats", srv.ClientURL(), "--builtin", "--sandbox", sandbox,
			"--exec", "shout=" + script, "--tools", "update_file,shout", "--id", "w1",
			"--metrics", "127.0.0.1:0",
		}, io.Discard, &logs)
	})

	for i, c := range []struct{ tool, args string }{
		{"update_file", `{"path":"a.txt","content":"hi"}`},
		{"shout", `{}`},
	} {
		req := wire.CallRequest{RunID: "r1", ConversationID: "c1", ToolCallID: string(rune('a' + i)), ToolName: c.tool,
			Args: json.RawMessage(c.args), Deadline: time.Now().Add(time.Minute)}
		if _, err := b.PublishCall(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	for range 2 {
		bustest.Poll(t, bustest.Timeout, "a reply", func() (bool, string) {
			if exited.Load() {
				t.Fatalf("run ended early: %v\n%s", stop(), logs.String())
			}
			select {
			case r := <-replies:
				got[r.ToolCallID] = string(r.Value)
				if r.WorkerID != "w1" {
					t.Errorf("worker id = %q, want w1", r.WorkerID)
				}
				return true, ""
			default:
				return false, logs.String()
			}
		})
	}
	// One info line per executed call, at the default level.
	bustest.Poll(t, bustest.Timeout, "a log line per call", func() (bool, string) {
		return strings.Count(logs.String(), `msg="call executed"`) == 2, logs.String()
	})
	want := map[string]string{"a": `"File 'a.txt' updated: 'hi'"`, "b": `"HEY"`}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("reply %s = %s, want %s", k, got[k], v)
		}
	}
	if data, err := os.ReadFile(filepath.Join(sandbox, "a.txt")); err != nil || string(data) != "hi" {
		t.Errorf("sandbox file = %q, %v", data, err)
	}

	// --metrics: the calls are counted once their handlers have ended.
	addrRE := regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)
	var n float64
	bustest.Poll(t, bustest.Timeout, "metrics to count 2 calls", func() (bool, string) {
		m := addrRE.FindStringSubmatch(logs.String())
		if m == nil {
			return false, logs.String()
		}
		fams, err := telemetrytest.ScrapeURL(t.Context(), "http://"+m[1]+"/metrics")
		if err != nil {
			t.Fatalf("scrape: %v", err)
		}
		a, _ := fams.Value("toolgate_tool_calls_total", "tool", "update_file", "outcome", "return")
		b, _ := fams.Value("toolgate_tool_calls_total", "tool", "shout", "outcome", "return")
		n = a + b
		if d, ok := fams.Value("toolgate_worker_consumer_drifts_total"); !ok || d != 0 {
			t.Fatalf("toolgate_worker_consumer_drifts_total = %v, %v; want 0, exported", d, ok)
		}
		return n == 2, fmt.Sprintf("%v calls counted; log:\n%s", n, logs.String())
	})
	http.DefaultClient.CloseIdleConnections()

	if err := stop(); err != nil {
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},                                   // no tools
		{"--exec", "noequals"},               // not NAME=COMMAND
		{"--exec", "a.b=true"},               // bad tool name
		{"--http", "hook=ftp://x"},           // not http
		{"--builtin", "--tools", "missing"},  // unknown subset
		{"--builtin", "--log-level", "loud"}, // bad level
		{"--builtin", "--concurrency", "0"},
		{"--http", "hook=http://x", "--http-retries", "-1"},
		{"--http", "hook=http://x", "--http-backoff", "0s"},
		{"--builtin", "--metrics", "127.0.0.1:not-a-port"},
		{"--builtin", "--mcp-header", "srv=Authorization:x"},                                       // no such --mcp
		{"--mcp", "srv=node server.js", "--mcp-header", "srv=Authorization:x"},                     // a command has no headers
		{"--mcp", "srv=http://127.0.0.1:1/mcp", "--mcp-header", "srv=Authorization"},               // not Key:Value
		{"--mcp", "srv=http://127.0.0.1:1/mcp", "--mcp-header", "srv=Authorization:@/nonexistent"}, // unreadable file
	} {
		var out syncBuffer
		if err := run(t.Context(), append(args, "--sandbox", t.TempDir()), io.Discard, &out); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}

func TestRunRefusesAnExecProgramThatCannotRun(t *testing.T) {
	// Refused before connecting: no server answers on this URL, and the
	// error names the program rather than NATS.
	err := run(t.Context(), []string{"--exec", "t=/no/such/program --x", "--nats", "nats://127.0.0.1:1", "--connect-timeout", "100ms"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--exec t") || !strings.Contains(err.Error(), "/no/such/program") {
		t.Errorf("run = %v, want --exec t refused for its missing program", err)
	}
}

func TestHelpAndVersion(t *testing.T) {
	clitest.CheckHelp(t, "tool-worker", func(args []string, stdout *bytes.Buffer) error {
		return run(t.Context(), args, stdout, io.Discard)
	}, "TOOLGATE_NATS_URL", "TOOLGATE_NATS_PASSWORD", "OTEL_EXPORTER_OTLP_ENDPOINT")
}

// With --password-file the NATS password is in neither the command line
// nor the environment of the worker, so an --exec program, which may read
// its parent's /proc/<pid>/cmdline and environ, finds it nowhere; and the
// password taken from TOOLGATE_NATS_PASSWORD is not passed on to it either.
func TestExecProgramDoesNotSeeThePassword(t *testing.T) {
	const secret = "s3cret-nats-password"
	var users []bus.User
	for _, role := range []string{bus.RoleOrchestrator, bus.RoleWorker} {
		p, err := bus.RolePermissions(role)
		if err != nil {
			t.Fatal(err)
		}
		users = append(users, bus.User{Name: role, Password: secret, Permissions: p})
	}
	srv := bustest.StartServer(t, embedded.ServerConfig{Users: users})
	b := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "test", User: bus.RoleOrchestrator, Password: secret})
	bustest.Setup(t, b)
	replies := make(chan wire.CallReply, 4)
	sub, err := b.ConsumeReplies(t.Context(), "test", bus.ConsumeConfig{}, bus.HandlerFunc[bus.Reply](
		func(_ context.Context, d *bus.Delivery[bus.Reply]) error {
			if d.Msg.Call != nil {
				replies <- *d.Msg.Call
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop(context.Background()) })

	dir := t.TempDir()
	pwFile := filepath.Join(dir, "nats-password")
	if err := os.WriteFile(pwFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The program looks where it can: its environment, and its parent's
	// command line and environment.
	spy := filepath.Join(dir, "spy.sh")
	if err := os.WriteFile(spy, []byte(`#!/bin/sh
found=""
env | grep -q '`+secret+`' && found="$found env"
tr '\0' '\n' < /proc/$PPID/cmdline | grep -q '`+secret+`' && found="$found parent-cmdline"
tr '\0' '\n' < /proc/$PPID/environ | grep -q '`+secret+`' && found="$found parent-environ"
test -n "$TOOLGATE_NATS_PASSWORD" && found="$found TOOLGATE_NATS_PASSWORD"
printf '"%s"' "$found"
`), 0o755); err != nil {
		t.Fatal(err)
	}
	// Set after this process started, so it is not in its /proc environ:
	// the worker must take it and pass it on to no program.
	t.Setenv(bus.EnvPassword, "from-the-environment")
	var logs syncBuffer
	stop := bustest.Run(t, "tool-worker", func(ctx context.Context) error {
		return run(ctx, []string{"--nats", srv.ClientURL(), "--user", bus.RoleWorker, "--password-file", pwFile,
			"--exec", "spy=" + spy, "--id", "w1", "--advertise=false"}, io.Discard, &logs)
	})
	req := wire.CallRequest{RunID: "r1", ConversationID: "c1", ToolCallID: "a", ToolName: "spy",
		Args: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)}
	if _, err := b.PublishCall(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	var r wire.CallReply
	bustest.Poll(t, bustest.Timeout, "the spy's reply", func() (bool, string) {
		select {
		case r = <-replies:
			return true, ""
		default:
			return false, logs.String()
		}
	})
	if r.Outcome != wire.OutcomeReturn || string(r.Value) != `""` {
		t.Errorf("the program found the password in:%s (%s %s)", r.Value, r.Outcome, r.Message)
	}
	if v, ok := os.LookupEnv(bus.EnvPassword); ok {
		t.Errorf("%s still in the environment: %q", bus.EnvPassword, v)
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v\n%s", err, logs.String())
	}
}
