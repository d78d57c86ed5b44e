package approval_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/wire"
)

// With a real orchestrator, a bot decides only pending requests (a
// cancelled and deleted conversation's are "settled") and reports a
// decision the orchestrator refuses (unsigned where keys are trusted) as
// "refused", with the reason.
func TestBotSkipsSettledRequestsAndReportsRefusals(t *testing.T) {
	_, otherKey, err := approval.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	sys := testkit.Test(t, testkit.Options{Logger: bustest.Logger(t), Listen: true})
	ctx := bustest.Context(t)
	o, err := sys.Orchestrator(ctx, "orchestrator", orchestrator.Config{
		TrustedApprovers: map[string]ed25519.PublicKey{"other": otherKey.Public().(ed25519.PublicKey)}})
	if err != nil {
		t.Fatal(err)
	}
	var convs []string
	for range 2 {
		info, err := o.StartRunWith(ctx, orchestrator.StartRequest{Prompt: "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`"})
		if err != nil {
			t.Fatal(err)
		}
		convs = append(convs, info.ConversationID)
	}
	approvals := map[string][]string{}
	for _, id := range convs {
		bustest.Poll(t, bustest.Timeout, "conversation paused", func() (bool, string) {
			c, err := o.Conversation(ctx, id)
			if err != nil {
				return false, err.Error()
			}
			approvals[id] = nil
			for _, pc := range c.PendingCalls() {
				if pc.Kind == wire.ReplyKindApproval {
					approvals[id] = append(approvals[id], pc.RunID+"/"+pc.ToolCallID)
				}
			}
			return c.Status == conversation.StatusPaused && len(approvals[id]) > 0, string(c.Status)
		})
	}
	deleted, live := convs[0], convs[1]
	if _, err := o.Cancel(ctx, deleted); err != nil {
		t.Fatal(err)
	}
	if err := o.Delete(ctx, deleted); err != nil {
		t.Fatal(err)
	}

	nc, err := nats.Connect(sys.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var mu sync.Mutex
	handled := map[string][]string{}
	var reasons []string
	bot, err := approval.New(nc, approval.Config{ID: "bot",
		Handled: func(req approval.Request, o string) {
			mu.Lock()
			defer mu.Unlock()
			handled[o] = append(handled[o], req.RunID+"/"+req.ToolCallID)
		},
		Refused: func(_ approval.Request, verdict, reason string) {
			mu.Lock()
			defer mu.Unlock()
			reasons = append(reasons, verdict+": "+reason)
		},
	}, approval.DeciderFunc(func(context.Context, approval.Request) (approval.Verdict, error) {
		return approval.Approve(), nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	bustest.Run(t, "bot", bot.Run)
	bustest.Poll(t, bustest.Timeout, "every request handled", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		slices.Sort(handled["settled"])
		slices.Sort(handled["refused"])
		return slices.Equal(handled["settled"], approvals[deleted]) && slices.Equal(handled["refused"], approvals[live]),
			fmt.Sprintf("handled %v; want settled %v, refused %v", handled, approvals[deleted], approvals[live])
	})
	mu.Lock()
	defer mu.Unlock()
	if len(handled["approved"]) != 0 {
		t.Errorf("reported approved: %v", handled["approved"])
	}
	for _, r := range reasons {
		if !strings.HasPrefix(r, "refused: ") || !strings.Contains(r, "not trusted") {
			t.Errorf("refusal reported as %q", r)
		}
	}
}
