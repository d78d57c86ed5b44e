package testkit_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/internal/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The demo agent's seed conversation played through a whole system the
// kit assembled: it pauses on approvals and a worker's call, the bot and
// the worker answer, the follow-ups complete it. A worker killed before
// the start leaves the other to serve.
func TestSystemRunsTheSeedConversation(t *testing.T) {
	sys := testkit.Test(t, testkit.Options{Logger: bustest.Logger(t)})
	ctx := bustest.Context(t)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	o, err := sys.Orchestrator(ctx, "orchestrator", orchestrator.Config{TrustedApprovers: map[string]ed25519.PublicKey{"bot": pub}})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"worker-1", "worker-2"} {
		tools, err := testkit.BuiltinTools(filepath.Join(t.TempDir(), "sandbox"))
		if err != nil {
			t.Fatal(err)
		}
		w, err := sys.Worker(ctx, name, worker.Config{ID: name, Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		if name == "worker-1" {
			w.Kill()
		}
	}
	if _, err := sys.Approver(ctx, approver.Config{ID: "bot", Key: priv}, testkit.SeedPolicy); err != nil {
		t.Fatal(err)
	}

	info, err := o.StartRunWith(ctx, orchestrator.StartRequest{Prompt: "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`"})
	if err != nil {
		t.Fatal(err)
	}
	var c *conversation.State
	bustest.Poll(t, bustest.Timeout, "the conversation to end", func() (bool, string) {
		if c, err = o.Conversation(ctx, info.ConversationID); err != nil {
			return false, err.Error()
		}
		return c.Status.Terminal(), string(c.Status)
	})
	if c.Status != conversation.StatusCompleted || len(c.Runs) < 2 {
		t.Fatalf("conversation %s after %d runs (%s); want completed after a follow-up", c.Status, len(c.Runs), c.Error)
	}

	// Stopped by hand, the orchestrator is not stopped again by Close.
	if err := o.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Close stops what is still running and reports a part that failed.
func TestClosesPartsAndReportsTheirErrors(t *testing.T) {
	ctx := bustest.Context(t)
	sys, err := testkit.Start(ctx, testkit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := sys.Connect(ctx, bus.ConnConfig{Name: "part"})
	if err != nil {
		t.Fatal(err)
	}
	sys.Go("failing", b, func(ctx context.Context) error {
		<-ctx.Done()
		return errFailed
	})
	sys.Go("quiet", nil, func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	if err := sys.Close(ctx); err == nil || !errors.Is(err, errFailed) {
		t.Fatalf("Close: %v; want the failing part's error", err)
	}
	if !b.Conn().IsClosed() {
		t.Error("the part's connection is still open after Close")
	}
	if err := sys.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

var errFailed = errors.New("failed")
