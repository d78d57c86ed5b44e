package inbox_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/bus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every blocking wait in these tests.
const wait = 20 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	t.Cleanup(cancel)
	return ctx
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// startBus runs an embedded JetStream server with toolgate's streams.
func startBus(t *testing.T) *bus.Bus {
	t.Helper()
	srv, err := bus.StartServer(bus.ServerConfig{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	b, err := srv.Connect(ctxT(t), bus.ConnConfig{Name: "test"})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(b.Close)
	if err := b.Setup(ctxT(t), bus.SetupConfig{}); err != nil {
		t.Fatalf("setup: %v", err)
	}
	return b
}

// clock is a settable clock for deadlines.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off += d
}

// startInbox runs an inbox until the test ends and waits until it takes
// requests. stop ends it early and waits for Run to return.
func startInbox(t *testing.T, cfg inbox.Config) (in *inbox.Inbox, stop func()) {
	t.Helper()
	if cfg.ID == "" {
		cfg.ID = "human"
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	in, err := inbox.New(cfg)
	if err != nil {
		t.Fatalf("new inbox: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("inbox run: %v", err)
				}
			case <-time.After(wait):
				t.Errorf("inbox did not stop")
			}
		})
	}
	t.Cleanup(stop)
	waitFor(t, "inbox ready", in.Ready)
	return in, stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

const schemaPath = `{"type":"object","properties":{"path":{"type":"string","minLength":1},"force":{"type":"boolean"}},"required":["path"],"additionalProperties":false}`

// request builds a valid approval request for delete_file.
func request(t *testing.T, run, call, args string, deadline time.Time) bus.ApprovalRequest {
	t.Helper()
	digest, err := bus.DigestArgs(json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	return bus.ApprovalRequest{
		RunID: run, ConversationID: "conv-" + run, ToolCallID: call, ToolName: "delete_file",
		ToolDescription: "Delete a file in the workspace.",
		Parameters:      json.RawMessage(schemaPath),
		Args:            json.RawMessage(args), ArgsDigest: digest,
		Metadata: json.RawMessage(`{"reason":"deleting files needs a human"}`),
		Deadline: deadline,
	}
}

func publish(t *testing.T, b *bus.Bus, reqs ...bus.ApprovalRequest) {
	t.Helper()
	for _, r := range reqs {
		if _, err := b.PublishApproval(ctxT(t), r); err != nil {
			t.Fatalf("publish approval: %v", err)
		}
	}
}

func publishEvent(t *testing.T, b *bus.Bus, ev bus.Event) {
	t.Helper()
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if _, err := b.PublishEvent(ctxT(t), ev); err != nil {
		t.Fatalf("publish event: %v", err)
	}
}

// decisionOf reads the last decision published for run, or nil.
func decisionOf(t *testing.T, b *bus.Bus, run string) *bus.Decision {
	t.Helper()
	s, err := b.JetStream().Stream(ctxT(t), bus.StreamReplies)
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := bus.DecisionSubject(run)
	m, err := s.GetLastMsgForSubject(ctxT(t), subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var d bus.Decision
	if err := bus.Decode(m.Data, m.Header.Get(bus.HeaderContentType), &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

func waitDecision(t *testing.T, b *bus.Bus, run string) bus.Decision {
	t.Helper()
	var d *bus.Decision
	waitFor(t, "decision for "+run, func() bool {
		d = decisionOf(t, b, run)
		return d != nil
	})
	return *d
}

func pendingKeys(in *inbox.Inbox) []string {
	var out []string
	for _, it := range in.Pending() {
		out = append(out, it.Key)
	}
	return out
}

func hasPending(in *inbox.Inbox, key string) bool {
	for _, it := range in.Pending() {
		if it.Key == key {
			return true
		}
	}
	return false
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// do runs one request against h from a loopback client.
func do(t *testing.T, h http.Handler, method, target, body string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, target, r)
	req.RemoteAddr = "127.0.0.1:40000"
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}
