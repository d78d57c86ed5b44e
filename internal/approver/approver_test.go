package approver_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type handled struct {
	approverID string
	req        wire.ApprovalRequest
	outcome    approver.Outcome
}

// runApprover starts an approver whose HandledFunc reports on the returned
// channel; the approver is stopped, and Run's error checked, at cleanup.
func runApprover(t *testing.T, cfg approver.Config) <-chan handled {
	t.Helper()
	ch := make(chan handled, 64)
	id := cfg.ID
	cfg.HandledFunc = func(req wire.ApprovalRequest, o approver.Outcome) {
		ch <- handled{approverID: id, req: req, outcome: o}
	}
	if cfg.Logger == nil {
		cfg.Logger = bustest.Logger(t)
	}
	a, err := approver.New(cfg)
	if err != nil {
		t.Fatalf("new approver: %v", err)
	}
	bustest.Run(t, "approver "+id, a.Run)
	return ch
}

func approvalRequest(t *testing.T, run, call, tool, args string) wire.ApprovalRequest {
	t.Helper()
	digest, err := wire.DigestArgs(json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	return wire.ApprovalRequest{
		RunID: run, ConversationID: "conv-1", ToolCallID: call, ToolName: tool,
		Args: json.RawMessage(args), ArgsDigest: digest,
		Metadata: json.RawMessage(`{"reason":"test"}`),
		Deadline: time.Now().Add(time.Hour),
	}
}

func publish(t *testing.T, b *bus.Bus, reqs ...wire.ApprovalRequest) {
	t.Helper()
	for _, r := range reqs {
		if _, err := b.PublishApproval(bustest.Context(t), r); err != nil {
			t.Fatalf("publish approval %s: %v", r.ToolCallID, err)
		}
	}
}

func next(t *testing.T, ch <-chan handled) handled {
	t.Helper()
	return bustest.Recv(t, ch, "a handled request")
}

const e2ePolicy = `
rules:
  - tool: delete_file
    action: deny
    message: Deleting files is not allowed
  - tool: pay
    when: args.amount <= 20
    action: approve
    override_args: {amount: 20, note: capped}
  - tool: pay
    action: escalate
  - action: approve
`

func TestApproverPublishesSignedDecisions(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	pol, err := approver.ParsePolicy([]byte(e2ePolicy))
	if err != nil {
		t.Fatal(err)
	}
	pub, priv := newKey(t)
	// A fixed clock: decided_at is known, and deadlines are set from it.
	decidedAt := time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC)
	events := runApprover(t, approver.Config{
		Bus: b, ID: "bot-1", Policy: pol, Key: priv,
		Clock: func() time.Time { return decidedAt },
	})

	tests := []struct {
		name    string
		req     wire.ApprovalRequest
		want    *wire.Decision // nil: no decision
		outcome approver.Outcome
	}{
		{
			name:    "deny with message",
			req:     approvalRequest(t, "run-a", "c1", "delete_file", `{"path":"/tmp/x"}`),
			want:    &wire.Decision{Approved: false, Message: "Deleting files is not allowed"},
			outcome: approver.OutcomeDenied,
		},
		{
			name:    "approve with override args",
			req:     approvalRequest(t, "run-b", "c2", "pay", `{"amount":5,"to":"bob"}`),
			want:    &wire.Decision{Approved: true, OverrideArgs: json.RawMessage(`{"amount":20,"note":"capped"}`)},
			outcome: approver.OutcomeApproved,
		},
		{
			name:    "escalated: no decision",
			req:     approvalRequest(t, "run-c", "c3", "pay", `{"amount":500}`),
			outcome: approver.OutcomeEscalated,
		},
		{
			name:    "approve",
			req:     approvalRequest(t, "run-d", "c4", "write_file", `{"path":"a","content":"b"}`),
			want:    &wire.Decision{Approved: true},
			outcome: approver.OutcomeApproved,
		},
	}
	for _, tt := range tests {
		tt.req.Deadline = decidedAt.Add(time.Minute)
		publish(t, b, tt.req)
		h := next(t, events)
		if h.req.ToolCallID != tt.req.ToolCallID || h.outcome != tt.outcome {
			t.Fatalf("%s: handled %s as %s, want %s as %s", tt.name, h.req.ToolCallID, h.outcome, tt.req.ToolCallID, tt.outcome)
		}
		got := bustest.Decisions(t, b, tt.req.RunID)
		if tt.want == nil {
			if len(got) != 0 {
				t.Errorf("%s: got decisions %+v, want none", tt.name, got)
			}
			continue
		}
		if len(got) != 1 {
			t.Fatalf("%s: got %d decisions, want 1", tt.name, len(got))
		}
		want := *tt.want
		want.RunID, want.ToolCallID, want.ArgsDigest = tt.req.RunID, tt.req.ToolCallID, tt.req.ArgsDigest
		want.ApproverID, want.DecidedAt = "bot-1", decidedAt
		if err := approver.Verify(pub, got[0]); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
		// The id docs/protocol.md gives: <run_id>/<tool_call_id>/decision.<approver_id>.<hash>.
		subj, err := wire.DecisionSubject(tt.req.RunID)
		if err != nil {
			t.Fatal(err)
		}
		body, err := got[0].SigningBytes()
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(append(body, got[0].Signature...))
		wantID := tt.req.RunID + "/" + tt.req.ToolCallID + "/decision.bot-1." + hex.EncodeToString(sum[:8])
		if id := bustest.Messages(t, b, wire.StreamReplies, subj)[0].Headers().Get(wire.HeaderMsgID); id != wantID {
			t.Errorf("%s: Nats-Msg-Id %q, want %q", tt.name, id, wantID)
		}
		if diff := cmp.Diff(want, got[0], cmpopts.IgnoreFields(wire.Decision{}, "Signature"),
			cmpopts.EquateEmpty(), cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
			t.Errorf("%s: decision (-want +got):\n%s", tt.name, diff)
		}
	}
	waitAcked(t, b, "bot-1")
}

// waitAcked waits until the approver's durable has nothing outstanding:
// every delivered request, escalated ones included, was acked.
func waitAcked(t *testing.T, b *bus.Bus, durable string) {
	t.Helper()
	bustest.Poll(t, bustest.Timeout, "consumer "+durable+" to have acked everything", func() (bool, string) {
		c, err := b.JetStream().Consumer(bustest.Context(t), wire.StreamApprovals, durable)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(bustest.Context(t))
		if err != nil {
			t.Fatal(err)
		}
		return info.NumAckPending == 0 && info.NumPending == 0 && info.NumRedelivered == 0,
			fmt.Sprintf("%d ack pending, %d pending, %d redelivered", info.NumAckPending, info.NumPending, info.NumRedelivered)
	})
}

func TestApproverUnsignedWithoutKey(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	pol, err := approver.ParsePolicy([]byte("rules:\n  - action: approve\n"))
	if err != nil {
		t.Fatal(err)
	}
	events := runApprover(t, approver.Config{Bus: b, ID: "plain", Policy: pol})
	req := approvalRequest(t, "run-u", "c1", "x", `{}`)
	publish(t, b, req)
	if h := next(t, events); h.outcome != approver.OutcomeApproved {
		t.Fatalf("outcome %s", h.outcome)
	}
	got := bustest.Decisions(t, b, req.RunID)
	if len(got) != 1 || got[0].Signature != nil || !got[0].Approved || got[0].ApproverID != "plain" {
		t.Fatalf("decisions = %+v", got)
	}
}

func TestApproverFanOut(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	pol, err := approver.ParsePolicy([]byte("rules:\n  - action: approve\n"))
	if err != nil {
		t.Fatal(err)
	}
	ea := runApprover(t, approver.Config{Bus: b, ID: "alpha", Policy: pol})
	eb := runApprover(t, approver.Config{Bus: b, ID: "beta", Policy: pol})
	req := approvalRequest(t, "run-f", "c1", "anything", `{"k":1}`)
	publish(t, b, req)
	for _, ch := range []<-chan handled{ea, eb} {
		h := next(t, ch)
		if h.req.ToolCallID != "c1" || h.outcome != approver.OutcomeApproved {
			t.Errorf("%s handled %s as %s", h.approverID, h.req.ToolCallID, h.outcome)
		}
	}
	var ids []string
	for _, d := range bustest.Decisions(t, b, req.RunID) {
		ids = append(ids, d.ApproverID)
	}
	if diff := cmp.Diff([]string{"alpha", "beta"}, ids, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("decision approvers (-want +got):\n%s", diff)
	}
}

func TestApproverSkipsExpired(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	pol, err := approver.ParsePolicy([]byte("rules:\n  - action: approve\n"))
	if err != nil {
		t.Fatal(err)
	}
	events := runApprover(t, approver.Config{Bus: b, ID: "late", Policy: pol})
	old := approvalRequest(t, "run-old", "c1", "x", `{}`)
	old.Deadline = time.Now().Add(-time.Second)
	fresh := approvalRequest(t, "run-new", "c2", "x", `{}`)
	publish(t, b, old, fresh)
	if h := next(t, events); h.req.ToolCallID != "c1" || h.outcome != approver.OutcomeExpired {
		t.Fatalf("first: %s %s", h.req.ToolCallID, h.outcome)
	}
	if h := next(t, events); h.req.ToolCallID != "c2" || h.outcome != approver.OutcomeApproved {
		t.Fatalf("second: %s %s", h.req.ToolCallID, h.outcome)
	}
	if got := bustest.Decisions(t, b, "run-old"); len(got) != 0 {
		t.Errorf("expired request got decisions %+v", got)
	}
	waitAcked(t, b, "late")
}

func TestApproverInteractive(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	pol, err := approver.ParsePolicy([]byte("rules:\n  - tool: safe\n    action: approve\n"))
	if err != nil {
		t.Fatal(err)
	}
	in, w := io.Pipe()
	var out syncBuffer
	prompt := approver.NewPrompt(in, &out)
	t.Cleanup(func() {
		prompt.Close()
		w.Close()
	})
	pub, priv := newKey(t)
	events := runApprover(t, approver.Config{Bus: b, ID: "human", Policy: pol, Asker: prompt, Key: priv})

	// The policy decides what it can without asking.
	safe := approvalRequest(t, "run-s", "c0", "safe", `{}`)
	publish(t, b, safe)
	if h := next(t, events); h.outcome != approver.OutcomeApproved {
		t.Fatalf("safe: %s", h.outcome)
	}

	req := approvalRequest(t, "run-i", "c1", "shell", `{"cmd":"rm -rf /tmp/x"}`)
	publish(t, b, req)
	if _, err := io.WriteString(w, "e\n{\"cmd\":\"ls /tmp/x\"}\n"); err != nil {
		t.Fatal(err)
	}
	if h := next(t, events); h.outcome != approver.OutcomeApproved {
		t.Fatalf("edited: %s", h.outcome)
	}
	got := bustest.Decisions(t, b, req.RunID)
	if len(got) != 1 || !got[0].Approved || string(got[0].OverrideArgs) != `{"cmd":"ls /tmp/x"}` {
		t.Fatalf("decisions = %+v", got)
	}
	if err := approver.Verify(pub, got[0]); err != nil {
		t.Error(err)
	}

	skip := approvalRequest(t, "run-k", "c2", "shell", `{"cmd":"reboot"}`)
	publish(t, b, skip)
	if _, err := io.WriteString(w, "s\n"); err != nil {
		t.Fatal(err)
	}
	if h := next(t, events); h.outcome != approver.OutcomeEscalated {
		t.Fatalf("skipped: %s", h.outcome)
	}
	if got := bustest.Decisions(t, b, skip.RunID); len(got) != 0 {
		t.Errorf("skipped request got decisions %+v", got)
	}
	if o := out.String(); !strings.Contains(o, `"cmd": "reboot"`) || strings.Contains(o, "safe") {
		t.Errorf("prompt output:\n%s", o)
	}
	waitAcked(t, b, "human")
}

func TestApproverStopsWhenPromptInputEnds(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	prompt := approver.NewPrompt(strings.NewReader(""), io.Discard)
	t.Cleanup(func() { prompt.Close() })
	a, err := approver.New(approver.Config{Bus: b, ID: "gone", Asker: prompt, Logger: bustest.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(context.Background()) }()
	publish(t, b, approvalRequest(t, "run-e", "c1", "x", `{}`))
	select {
	case err := <-done:
		if !errors.Is(err, io.EOF) {
			t.Errorf("Run = %v, want an error wrapping EOF", err)
		}
	case <-time.After(bustest.Timeout):
		t.Fatal("Run did not stop")
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	pol, err := approver.ParsePolicy([]byte("rules: []\n"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		cfg  approver.Config
	}{
		{"no bus", approver.Config{ID: "a", Policy: pol}},
		{"no id", approver.Config{Bus: b, Policy: pol}},
		{"id with a dot", approver.Config{Bus: b, ID: "a.b", Policy: pol}},
		{"neither policy nor asker", approver.Config{Bus: b, ID: "a"}},
		{"short key", approver.Config{Bus: b, ID: "a", Policy: pol, Key: ed25519.PrivateKey{1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := approver.New(tt.cfg); err == nil {
				t.Error("New succeeded")
			}
		})
	}
}
