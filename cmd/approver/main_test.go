package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 20 * time.Second

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

	srv, err := bus.StartServer(bus.ServerConfig{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	b, err := srv.Connect(ctx, bus.ConnConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Setup(ctx, bus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	args := json.RawMessage(`{"path":"__init__.py"}`)
	digest, err := bus.DigestArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishApproval(ctx, bus.ApprovalRequest{
		RunID: "run-1", ConversationID: "conv-1", ToolCallID: "call-1", ToolName: "delete_file",
		Args: args, ArgsDigest: digest, Deadline: time.Now().Add(time.Hour),
	}); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	var logs syncWriter
	go func() {
		done <- run(runCtx, []string{"--nats", srv.ClientURL(), "--policy", "../../examples/policy.yaml",
			"--key", keyFile, "--id", "cli-test"}, strings.NewReader(""), io.Discard, &logs)
	}()

	subj, _ := bus.DecisionSubject("run-1")
	s, err := b.JetStream().Stream(ctx, bus.StreamReplies)
	if err != nil {
		t.Fatal(err)
	}
	var raw *jetstream.RawStreamMsg
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for raw == nil {
		raw, err = s.GetLastMsgForSubject(ctx, subj)
		if err == nil {
			break
		}
		select {
		case <-tick.C:
		case err := <-done:
			t.Fatalf("approver exited early: %v\n%s", err, logs.String())
		case <-ctx.Done():
			t.Fatalf("no decision: %v\n%s", err, logs.String())
		}
	}
	var d bus.Decision
	if err := bus.Decode(raw.Data, raw.Header.Get(bus.HeaderContentType), &d); err != nil {
		t.Fatal(err)
	}
	if d.Approved || d.Message != "Deleting files is not allowed" || d.ApproverID != "cli-test" {
		t.Errorf("decision = %+v", d)
	}
	if err := approver.Verify(pub, d); err != nil {
		t.Error(err)
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after cancel: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("run did not return after cancel")
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
	id := defaultID()
	if err := bus.ValidateToken("id", id); err != nil {
		t.Errorf("defaultID() = %q: %v", id, err)
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
