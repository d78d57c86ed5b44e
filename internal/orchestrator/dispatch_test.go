package orchestrator_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// decide publishes a decision on call of c's batch under message id msgID.
func decide(t *testing.T, b *bus.Bus, c *orchestrator.Conversation, call, msgID string, approved bool, message string) {
	t.Helper()
	pc := pendingCall(t, c, call)
	publishRaw(t, b, decisionSubject(t, c.Batch.RunID), msgID, bus.Decision{
		RunID: c.Batch.RunID, ToolCallID: call, ArgsDigest: pc.ArgsDigest, Approved: approved, Message: message,
		ApproverID: "bot", DecidedAt: time.Now().UTC(),
	})
}

func isDispatched(pc *orchestrator.PendingCall) bool {
	return pc.Approval != nil && pc.Kind == deferred.KindCall
}

// waitPublishedCount waits until o has published n messages in all.
func waitPublishedCount(t *testing.T, o *orchestrator.Orchestrator, n int64) {
	t.Helper()
	waitFor(t, "the publications", func() (bool, string) {
		got := o.Stats().Published.Load()
		return got == n, ""
	})
}

// checkSeedHistory checks that the follow-up told the model, in one
// request and in the model's order, the denied delete, the README.md
// update and the .env update the worker ran once approved.
func checkSeedHistory(t *testing.T, c *orchestrator.Conversation) {
	t.Helper()
	if c.Status != orchestrator.StatusCompleted {
		t.Fatalf("conversation %s", describe(c))
	}
	if len(c.Runs) != 2 {
		t.Errorf("%d runs (%s), want 2: the prompt run and one follow-up", len(c.Runs), describe(c))
	}
	var got []string
	for _, m := range c.History {
		if m.RunID != c.Runs[1].RunID || m.Kind != "request" {
			continue
		}
		for _, p := range m.Parts {
			got = append(got, p.ToolCallID+" "+string(p.Outcome))
		}
	}
	want := "delete_file denied, update_file_readme success, update_file_dotenv success"
	if strings.Join(got, ", ") != want {
		t.Errorf("the follow-up's request holds %q, want %q", strings.Join(got, ", "), want)
	}
}

// An approved call of a tool that workers run goes to them when its
// decision is applied, published once under its message id: a decision
// delivered again is a duplicate that publishes nothing, and reconcile
// neither publishes it again nor races its result with a mark while it is
// fresh, then marks it without publishing it (this replica saw it stored).
// The worker's result then completes the batch, whose one follow-up asks
// the model: two runs, not a third that only deferred the call again.
func TestApprovedCallDispatchedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clock := &steppedClock{now: time.Now()}
	o, _ := e.orch(orchestrator.Config{Clock: clock.Now, ReconcileInterval: time.Hour})
	c := startPaused(t, o)
	published := o.Stats().Published.Load()
	b := e.connect("test")

	decide(t, b, c, "update_file_dotenv", "approve", true, "")
	decide(t, b, c, "update_file_dotenv", "approve-again", true, "")
	c = waitCall(t, o, c.ID, "update_file_dotenv", "the approval dispatched and its repeat seen", func(pc *orchestrator.PendingCall) bool {
		return isDispatched(pc) && pc.Duplicates == 1
	})
	waitPublishedCount(t, o, published+1)
	pc := pendingCall(t, c, "update_file_dotenv")
	if pc.Reply != nil || pc.Approval.By != "bot" || pc.Published {
		t.Errorf("dispatched call %+v, want pending, unmarked, approved by bot", pc)
	}

	writes := o.Stats().StateWrites.Load()
	if err := o.Reconcile(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if w, p := o.Stats().StateWrites.Load()-writes, o.Stats().Published.Load()-published; w != 0 || p != 1 {
		t.Errorf("a pass right after the dispatch: %d writes, %d publications in all; want none more", w, p)
	}
	clock.step(30 * time.Second)
	if err := o.Reconcile(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitCall(t, o, c.ID, "update_file_dotenv", "the pass to mark the dispatched call", func(pc *orchestrator.PendingCall) bool { return pc.Published })
	if p := o.Stats().Published.Load() - published; p != 1 {
		t.Errorf("%d publications after the pass, want the dispatch's one", p)
	}

	sandbox := e.worker()
	decide(t, b, c, "delete_file", "deny", false, "Deleting files is not allowed")
	checkSeedHistory(t, waitStatus(t, o, c.ID, orchestrator.StatusCompleted, orchestrator.StatusFailed))
	if env, err := os.ReadFile(filepath.Join(sandbox, ".env")); err != nil || len(env) != 0 {
		t.Errorf(".env = %q, %v; want written empty by the worker", env, err)
	}
	if p := o.Stats().Published.Load() - published; p != 1 {
		t.Errorf("%d calls published after the pause, want 1", p)
	}
}

// A decision stored whose call was never published (its replica stopped
// right after the append) is published by reconcile, once the dispatch is
// no longer fresh, and the conversation goes on as if nothing happened.
func TestDispatchLeftUnpublishedIsPublishedByReconcile(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	clock := &steppedClock{now: time.Now()}
	o, _ := e.orch(orchestrator.WithDispatchUnpublished(orchestrator.Config{Clock: clock.Now, ReconcileInterval: time.Hour}))
	sandbox := e.worker()
	c := startPaused(t, o)
	published := o.Stats().Published.Load()
	b := e.connect("test")

	decide(t, b, c, "delete_file", "deny", false, "Deleting files is not allowed")
	decide(t, b, c, "update_file_dotenv", "approve", true, "")
	c = waitCall(t, o, c.ID, "update_file_dotenv", "the approval dispatched", isDispatched)
	if err := o.Reconcile(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if p := o.Stats().Published.Load() - published; p != 0 {
		t.Errorf("%d publications before the dispatch is due to reconcile, want none", p)
	}
	if c, err := o.Conversation(ctxT(t), c.ID); err != nil || c.Status != orchestrator.StatusPaused {
		t.Fatalf("before the pass: %v %s", err, describe(c))
	}

	clock.step(30 * time.Second)
	if err := o.Reconcile(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if p := o.Stats().Published.Load() - published; p != 1 {
		t.Errorf("the pass published %d calls, want the dispatched one", p)
	}
	checkSeedHistory(t, waitStatus(t, o, c.ID, orchestrator.StatusCompleted, orchestrator.StatusFailed))
	if env, err := os.ReadFile(filepath.Join(sandbox, ".env")); err != nil || len(env) != 0 {
		t.Errorf(".env = %q, %v; want written empty by the worker", env, err)
	}
}

// A call approved with edited args is not dispatched on its decision: its
// follow-up validates the args (D24) and defers it again (D26). A prompt
// given while the batch waited goes with the follow-up that has that
// call's result, after it, as the model reads them, where the history used
// to hold it ahead of the result; and the decision keeps the edited args.
func TestPromptFollowsTheResultOfAnEditedApproval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sandbox := e.worker()
	o, _ := e.orch(orchestrator.Config{})
	c := startPaused(t, o)
	const prompt = "Now create a backup of README.md"
	if _, err := o.StartRun(ctxT(t), prompt, c.ID); err != nil {
		t.Fatal(err)
	}
	b := e.connect("test")
	decide(t, b, c, "delete_file", "deny", false, "Deleting files is not allowed")
	edited := `{"path":".env","content":"A=1"}`
	publishRaw(t, b, decisionSubject(t, c.Batch.RunID), "approve-edited", bus.Decision{
		RunID: c.Batch.RunID, ToolCallID: "update_file_dotenv", ArgsDigest: pendingCall(t, c, "update_file_dotenv").ArgsDigest,
		Approved: true, OverrideArgs: []byte(edited), ApproverID: "bot", DecidedAt: time.Now().UTC(),
	})
	c = waitStatus(t, o, c.ID, orchestrator.StatusCompleted, orchestrator.StatusFailed)
	if c.Status != orchestrator.StatusCompleted || len(c.Runs) != 3 {
		t.Fatalf("%s; want completed in three runs", describe(c))
	}
	if env, err := os.ReadFile(filepath.Join(sandbox, ".env")); err != nil || string(env) != "A=1" {
		t.Errorf(".env = %q, %v; want the edited content", env, err)
	}
	var order []string
	for _, m := range c.History {
		for _, p := range m.Parts {
			switch {
			case p.Kind == "user-prompt":
				order = append(order, "prompt "+p.Content)
			case p.Kind == "tool-return":
				order = append(order, "return "+p.ToolCallID)
			}
		}
	}
	want := "prompt " + seedPrompt + ", return delete_file, return update_file_readme, return update_file_dotenv, prompt " + prompt
	if got := strings.Join(order, ", "); got != want {
		t.Errorf("history order:\n got %s\nwant %s", got, want)
	}
	for _, d := range c.Decisions {
		if d.ToolCallID == "update_file_dotenv" && string(d.OverrideArgs) != edited {
			t.Errorf("decision %+v, want the edited args kept", d)
		}
	}
}
