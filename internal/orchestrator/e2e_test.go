package orchestrator_test

import (
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

const seedPrompt = "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`"

// The seed approval example over the bus: delete_file is denied by the
// approver's policy, the .env update is approved and then written by the
// worker, README.md is written at once; the conversation completes with the
// denied delete in its messages.
func TestSeedApprovalEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sandbox := e.worker()
	if err := os.WriteFile(filepath.Join(sandbox, "__init__.py"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	pub, priv := newKey(t)
	e.approverBot("bot", seedPolicy, priv)
	o, _ := e.orch(orchestrator.Config{TrustedApprovers: map[string]ed25519.PublicKey{"bot": pub}})

	info, err := o.StartRun(ctxT(t), seedPrompt, "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted {
		t.Fatalf("conversation %s: %s", c.Status, c.Error)
	}
	if !strings.Contains(c.Output, "Hello, world!") {
		t.Errorf("output = %q", c.Output)
	}
	readme, err := os.ReadFile(filepath.Join(sandbox, "README.md"))
	if err != nil || string(readme) != "Hello, world!" {
		t.Errorf("README.md = %q, %v", readme, err)
	}
	env, err := os.ReadFile(filepath.Join(sandbox, ".env"))
	if err != nil || len(env) != 0 {
		t.Errorf(".env = %q, %v", env, err)
	}
	if _, err := os.Stat(filepath.Join(sandbox, "__init__.py")); err != nil {
		t.Errorf("__init__.py was deleted: %v", err)
	}
	// Runs: the prompt run, and the follow-up with the denial and the
	// approved .env update's result, which the worker got once the update
	// was approved: two, as Pydantic AI takes.
	if len(c.Runs) != 2 {
		t.Errorf("runs = %+v, want 2", c.Runs)
	}
	var denied, dotenv bool
	for _, m := range c.History {
		for _, p := range m.Parts {
			if p.ToolCallID == "delete_file" && p.Outcome == "denied" {
				denied = strings.Contains(string(p.Value)+p.Content, "Deleting files is not allowed")
			}
			if p.ToolCallID == "update_file_dotenv" && p.Kind == "tool-return" && p.Outcome == "success" {
				dotenv = true
			}
		}
	}
	if !denied || !dotenv {
		b, _ := json.MarshalIndent(c.History, "", " ")
		t.Errorf("history lacks the denied delete (%v) or the .env return (%v):\n%s", denied, dotenv, b)
	}
}

// The seed external example: calculate_answer is answered by a worker and
// the follow-up's output holds 42.
func TestSeedExternalEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker("calculate_answer")
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, "")})
	info, err := o.StartRun(ctxT(t), "Calculate the answer to the ultimate question of life, the universe, and everything", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || !strings.Contains(c.Output, "42") {
		t.Fatalf("status %s, output %q, error %q", c.Status, c.Output, c.Error)
	}
	if len(c.Runs) != 2 || c.Runs[0].RunID == c.Runs[1].RunID {
		t.Errorf("runs = %+v, want the paused run and one follow-up", c.Runs)
	}
	// Its batch answered, the conversation has nothing left to expire.
	if n := orchestrator.ScheduledDeadlines(o); n != 0 {
		t.Errorf("%d conversations scheduled for expiry, want none", n)
	}
	var got string
	for _, m := range c.History {
		for _, p := range m.Parts {
			if p.Kind == "tool-return" && p.ToolCallID == "pyd_ai_tool_call_id" {
				got = string(p.Value)
			}
		}
	}
	if got != "42" {
		t.Errorf("tool return = %q, want 42", got)
	}
}

// With inline_wait, a fast worker's result is taken within the run: one run,
// no pause.
func TestInlineWaitResolvesWithinRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker("calculate_answer")
	cfg := externalAgent(t, "")
	cfg.InlineWait = orchestrator.Duration(20 * time.Second)
	o, _ := e.orch(orchestrator.Config{Agent: cfg})
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || !strings.Contains(c.Output, "42") {
		t.Fatalf("status %s, output %q, error %q", c.Status, c.Output, c.Error)
	}
	if len(c.Runs) != 1 {
		t.Errorf("runs = %+v, want one", c.Runs)
	}
	if n := o.Stats().FollowUps.Load(); n != 0 {
		t.Errorf("follow-ups = %d, want 0", n)
	}
}

// With inline_wait and no worker, the run waits, then pauses with the call
// already published; a later result completes it through a follow-up and
// the call is not published twice.
func TestInlineWaitBubblesOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := externalAgent(t, "")
	cfg.InlineWait = orchestrator.Duration(200 * time.Millisecond)
	o, _ := e.orch(orchestrator.Config{Agent: cfg})
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusPaused)
	if pc := pendingCall(t, c, "pyd_ai_tool_call_id"); !pc.Published {
		t.Fatalf("call not marked published: %s", describe(c))
	}
	e.worker("calculate_answer")
	c = waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || !strings.Contains(c.Output, "42") {
		t.Fatalf("status %s, output %q, error %q", c.Status, c.Output, c.Error)
	}
	if n := o.Stats().Published.Load(); n != 1 {
		t.Errorf("published %d messages, want 1", n)
	}
}
