package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/cli/clitest"
	"github.com/toolgate/toolgate/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestKeygenThenDecide(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "approver.key")
	var out bytes.Buffer
	if err := run(t.Context(), []string{"keygen", "--out", keyFile}, nil, &out, io.Discard); err != nil {
		t.Fatalf("keygen: %v", err)
	}
	pub, err := approver.ParsePublicKey(out.String())
	if err != nil {
		t.Fatalf("keygen printed %q: %v", out.String(), err)
	}

	srv := bustest.NewServer(t)
	b := bustest.Connect(t, srv, "test")
	bustest.Setup(t, b)
	publishApproval(t, b, `{"path":"__init__.py"}`)

	r := start(t, "--nats", srv.ClientURL(), "--policy", "../../examples/policy.yaml", "--key", keyFile, "--id", "cli-test")
	var d *wire.Decision
	bustest.Poll(t, bustest.Timeout, "a decision", func() (bool, string) {
		r.checkRunning(t)
		d = bustest.LastDecision(t, b, "run-1")
		return d != nil, r.logs.String()
	})
	if d.Approved || d.Message != "Deleting files is not allowed" || d.ApproverID != "cli-test" {
		t.Errorf("decision = %+v", d)
	}
	if err := approver.Verify(pub, *d); err != nil {
		t.Error(err)
	}
	if err := r.stop(); err != nil {
		t.Errorf("run after cancel: %v\n%s", err, r.logs.String())
	}
}

// publishApproval publishes a request to run delete_file with args, as
// call-1 of run-1.
func publishApproval(t *testing.T, b *bus.Bus, args string) {
	t.Helper()
	digest, err := wire.DigestArgs(json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishApproval(bustest.Context(t), wire.ApprovalRequest{
		RunID: "run-1", ConversationID: "conv-1", ToolCallID: "call-1", ToolName: "delete_file",
		Args: json.RawMessage(args), ArgsDigest: digest, Deadline: time.Now().Add(time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
}

// cmdRun is the command running in the test's process.
type cmdRun struct {
	logs   syncWriter
	exited atomic.Bool
	stop   func() error
}

// start runs the command with args (and empty stdin) until stop or the
// test's end.
func start(t *testing.T, args ...string) *cmdRun {
	t.Helper()
	r := &cmdRun{}
	r.stop = bustest.Run(t, "approver", func(ctx context.Context) error {
		defer r.exited.Store(true)
		return run(ctx, args, strings.NewReader(""), io.Discard, &r.logs)
	})
	return r
}

// checkRunning fails the test if the command has returned.
func (r *cmdRun) checkRunning(t *testing.T) {
	t.Helper()
	if r.exited.Load() {
		t.Fatalf("approver exited early: %v\n%s", r.stop(), r.logs.String())
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{}, // neither policy nor interactive
		{"--policy", "/nonexistent.yaml"},
		{"--interactive", "--id", "a.b"},
		{"--interactive", "--nats", "nats://127.0.0.1:1", "--connect-timeout", "50ms"},
		{"--interactive", "--log-level", "loud"},
		{"keygen"},
		{"--policy", "../../examples/policy.yaml", "extra"},
	} {
		if err := run(t.Context(), args, strings.NewReader(""), io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}

func TestDefaultID(t *testing.T) {
	id := cli.DefaultID("approver", "")
	if err := wire.ValidateToken("id", id); err != nil {
		t.Errorf("DefaultID = %q: %v", id, err)
	}
}

// A bot run as a NATS user is that user's approver unless --id says
// otherwise: the users file protects the durables of the user's name.
func TestIDDefaultsToTheUser(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"user", []string{"--user", "policybot", "--password", "x", "--policy", "p.yaml"}, "policybot"},
		{"id given", []string{"--user", "policybot", "--password", "x", "--id", "other", "--policy", "p.yaml"}, "other"},
		{"no user", []string{"--policy", "p.yaml"}, cli.DefaultID("approver", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseFlags(tc.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if o.id != tc.want {
				t.Errorf("id = %q, want %q", o.id, tc.want)
			}
		})
	}
}

// syncWriter collects the approver's log while it runs.
type syncWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestHelpAndVersion(t *testing.T) {
	clitest.CheckHelp(t, "approver", func(args []string, stdout *bytes.Buffer) error {
		return run(t.Context(), args, strings.NewReader(""), stdout, io.Discard)
	}, "TOOLGATE_NATS_URL", "TOOLGATE_ORCHESTRATOR_URL")
	clitest.CheckHelp(t, "approver approve", func(args []string, stdout *bytes.Buffer) error {
		return run(t.Context(), append([]string{"approve"}, args...), strings.NewReader(""), stdout, io.Discard)
	}, "TOOLGATE_NATS_URL")
}

// Flags may come before the subcommand as after it; a flag's value that
// reads like a subcommand stays the flag's.
func TestFlagsBeforeTheSubcommand(t *testing.T) {
	srv := bustest.NewServer(t)
	b := bustest.Connect(t, srv, "test")
	bustest.Setup(t, b)
	publishApproval(t, b, `{"path":"__init__.py"}`)
	for _, args := range [][]string{
		{"--nats", srv.ClientURL(), "list"},
		{"--nats=" + srv.ClientURL(), "--id", "list", "list"},
		{"list", "--nats", srv.ClientURL()},
	} {
		var out bytes.Buffer
		if err := run(t.Context(), args, strings.NewReader(""), &out, io.Discard); err != nil {
			t.Errorf("run(%q): %v", args, err)
			continue
		}
		if !strings.Contains(out.String(), "call-1") {
			t.Errorf("run(%q) listed:\n%s", args, out.String())
		}
	}
	var out bytes.Buffer
	if err := run(t.Context(), []string{"--nats", srv.ClientURL(), "--id", "cli", "approve", "call-1"}, strings.NewReader(""), &out, io.Discard); err != nil {
		t.Fatalf("approve with flags first: %v", err)
	}
	if !strings.Contains(out.String(), "approved run-1/call-1") {
		t.Errorf("approve said %q", out.String())
	}
}

// keygen says what NAME of --trust-approver NAME=KEY is: the approver's
// --id; stdout stays the key alone.
func TestKeygenSaysNameIsTheApproverID(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"keygen", "--out", filepath.Join(t.TempDir(), "k")}, nil, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if _, err := approver.ParsePublicKey(out.String()); err != nil {
		t.Errorf("stdout %q is not the key alone: %v", out.String(), err)
	}
	if !strings.Contains(errOut.String(), "--trust-approver ID=") || !strings.Contains(errOut.String(), "--id of the approver") {
		t.Errorf("keygen said %q, want the ID of --trust-approver explained", errOut.String())
	}
	var help bytes.Buffer
	if err := run(t.Context(), []string{"keygen", "--help"}, nil, &help, io.Discard); !errors.Is(err, cli.ErrHelp) {
		t.Fatalf("keygen --help: %v", err)
	}
	if !strings.Contains(help.String(), "NAME is the --id of") {
		t.Errorf("keygen --help does not say what NAME is:\n%s", help.String())
	}
}
