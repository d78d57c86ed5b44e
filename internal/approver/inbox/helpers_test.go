package inbox_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
		cfg.Logger = bustest.Logger(t)
	}
	in, err := inbox.New(cfg)
	if err != nil {
		t.Fatalf("new inbox: %v", err)
	}
	halt := bustest.Run(t, "inbox", in.Run)
	stop = func() {
		if err := halt(); err != nil {
			t.Errorf("inbox run: %v", err)
		}
	}
	bustest.WaitFor(t, "inbox ready", in.Ready)
	return in, stop
}

const schemaPath = `{"type":"object","properties":{"path":{"type":"string","minLength":1},"force":{"type":"boolean"}},"required":["path"],"additionalProperties":false}`

// request builds a valid approval request for delete_file.
func request(t *testing.T, run, call, args string, deadline time.Time) wire.ApprovalRequest {
	t.Helper()
	digest, err := wire.DigestArgs(json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	return wire.ApprovalRequest{
		RunID: run, ConversationID: "conv-" + run, ToolCallID: call, ToolName: "delete_file",
		ToolDescription: "Delete a file in the workspace.",
		Parameters:      json.RawMessage(schemaPath),
		Args:            json.RawMessage(args), ArgsDigest: digest,
		Metadata: json.RawMessage(`{"reason":"deleting files needs a human"}`),
		Deadline: deadline,
	}
}

func publish(t *testing.T, b *bus.Bus, reqs ...wire.ApprovalRequest) {
	t.Helper()
	for _, r := range reqs {
		if _, err := b.PublishApproval(bustest.Context(t), r); err != nil {
			t.Fatalf("publish approval: %v", err)
		}
	}
}

func publishEvent(t *testing.T, b *bus.Bus, ev wire.Event) {
	t.Helper()
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	if _, err := b.PublishEvent(bustest.Context(t), ev); err != nil {
		t.Fatalf("publish event: %v", err)
	}
}

func waitDecision(t *testing.T, b *bus.Bus, run string) wire.Decision {
	t.Helper()
	var d *wire.Decision
	bustest.WaitFor(t, "decision for "+run, func() bool {
		d = bustest.LastDecision(t, b, run)
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

// waitPending waits until the inbox shows exactly the requests keys.
func waitPending(t *testing.T, in *inbox.Inbox, keys ...string) {
	t.Helper()
	slices.Sort(keys)
	bustest.Poll(t, bustest.Timeout, fmt.Sprintf("pending %v", keys), func() (bool, string) {
		got := slices.Sorted(slices.Values(pendingKeys(in)))
		return slices.Equal(got, keys), fmt.Sprint(got)
	})
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
