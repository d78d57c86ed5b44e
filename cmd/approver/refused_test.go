package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/wire"
)

// `approver approve` of a decision the orchestrator refuses (unsigned,
// where keys are trusted) exits non-zero with the reason and prints no
// "approved".
func TestApproveRefusedExitsNonZero(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sys := testkit.Test(t, testkit.Options{Logger: bustest.Logger(t), Listen: true})
	ctx := bustest.Context(t)
	o, err := sys.Orchestrator(ctx, "orchestrator", orchestrator.Config{TrustedApprovers: map[string]ed25519.PublicKey{"cli": pub}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := o.StartRunWith(ctx, orchestrator.StartRequest{Prompt: "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`"})
	if err != nil {
		t.Fatal(err)
	}
	var call string
	bustest.Poll(t, bustest.Timeout, "an approval pending", func() (bool, string) {
		c, err := o.Conversation(ctx, info.ConversationID)
		if err != nil {
			return false, err.Error()
		}
		for _, pc := range c.PendingCalls() {
			if pc.Kind == wire.ReplyKindApproval && c.Status == conversation.StatusPaused {
				call = pc.RunID + "/" + pc.ToolCallID
				return true, ""
			}
		}
		return false, string(c.Status)
	})
	bustest.Poll(t, bustest.Timeout, "approver list to show it", func() (bool, string) {
		var list bytes.Buffer
		err := run(ctx, []string{"list", "--nats", sys.URL()}, strings.NewReader(""), &list, io.Discard)
		return err == nil && strings.Contains(list.String(), strings.SplitN(call, "/", 2)[0]), list.String()
	})
	var out, errOut bytes.Buffer
	err = run(ctx, []string{"--nats", sys.URL(), "--id", "cli", "approve", call}, strings.NewReader(""), &out, io.Discard)
	if code := cli.ExitCode("approver", err, &errOut); code == 0 {
		t.Fatalf("approve of a refused decision exited 0; printed %q", out.String())
	}
	if !strings.Contains(errOut.String(), "refused") || !strings.Contains(errOut.String(), "not signed") {
		t.Errorf("stderr %q does not say it was refused and why", errOut.String())
	}
	if strings.Contains(out.String(), "approved") {
		t.Errorf("printed %q for a refused decision", out.String())
	}
}
