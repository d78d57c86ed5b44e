package approver_test

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/wire"
)

// errorLog keeps the records of a logger's connection.
type errorLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *errorLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *errorLog) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Contains(l.buf.Bytes(), []byte(s))
}

// A bot whose durable is edited under it (its filter set to another
// tool's, which silenced it without a word and made it skip the requests
// published meanwhile for good) says so with an error, counts it, puts its
// filter back, and decides the requests it skipped and those published
// after.
func TestBotTellsAndRestoresItsEditedConsumer(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true})
	logs := &errorLog{}
	b := bustest.ConnectConfig(t, srv, bus.ConnConfig{Name: "policybot",
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError}))})
	bustest.Setup(t, b)
	other := bustest.Connect(t, srv, "operator")
	pol, err := approver.ParsePolicy([]byte("rules:\n  - action: approve\n"))
	if err != nil {
		t.Fatal(err)
	}
	events := runApprover(t, approver.Config{Bus: b, ID: "policybot", Policy: pol,
		// Checks far enough apart that the requests below reach the
		// edited consumer before a check puts it back.
		Consume: bus.ConsumeConfig{CheckEvery: 300 * time.Millisecond}})
	publish(t, other, approvalRequest(t, "run-1", "c1", "pay", `{}`))
	if h := next(t, events); h.req.ToolCallID != "c1" || h.outcome != approver.OutcomeApproved {
		t.Fatalf("handled %+v", h)
	}

	ctx := bustest.Context(t)
	cons, err := other.JetStream().Consumer(ctx, wire.StreamApprovals, "policybot")
	if err != nil {
		t.Fatal(err)
	}
	edited := cons.CachedInfo().Config
	edited.FilterSubject = "toolgate.approval.other"
	if _, err := other.JetStream().UpdateConsumer(ctx, wire.StreamApprovals, edited); err != nil {
		t.Fatal(err)
	}
	// "skipped" is passed over when the edited consumer delivers "bait".
	publish(t, other, approvalRequest(t, "run-1", "skipped", "pay", `{}`), approvalRequest(t, "run-1", "bait", "other", `{}`))
	if h := next(t, events); h.req.ToolCallID != "bait" {
		t.Fatalf("handled %+v, want bait through the edited filter", h)
	}
	bustest.WaitFor(t, "an error record of the edited consumer", func() bool {
		return logs.contains("level=ERROR") && logs.contains("consumer configuration was changed by another client")
	})
	if n := b.ConsumerDrifts(); n < 1 {
		t.Errorf("ConsumerDrifts = %d, want at least 1", n)
	}
	bustest.WaitFor(t, "the filter put back", func() bool {
		c, err := other.JetStream().Consumer(ctx, wire.StreamApprovals, "policybot")
		return err == nil && c.CachedInfo().Config.FilterSubject == wire.AllApprovals
	})
	publish(t, other, approvalRequest(t, "run-2", "c2", "pay", `{}`))
	decided := map[string]approver.Outcome{}
	for decided["skipped"] == "" || decided["c2"] == "" {
		h := next(t, events)
		if h.outcome != approver.OutcomeDuplicate {
			decided[h.req.ToolCallID] = h.outcome
		}
	}
	if decided["skipped"] != approver.OutcomeApproved || decided["c2"] != approver.OutcomeApproved {
		t.Errorf("decided %v, want the skipped request and c2 approved", decided)
	}
}
