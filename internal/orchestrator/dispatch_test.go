package orchestrator_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// decide publishes a decision on call of c's batch under message id msgID.
func decide(t *testing.T, b *bus.Bus, c *conversation.State, call, msgID string, approved bool, message string) {
	t.Helper()
	pc := pendingCall(t, c, call)
	publishRaw(t, b, decisionSubject(t, c.Batch.RunID), msgID, wire.Decision{
		RunID: c.Batch.RunID, ToolCallID: call, ArgsDigest: pc.ArgsDigest, Approved: approved, Message: message,
		ApproverID: "bot", DecidedAt: time.Now().UTC(),
	})
}

func isDispatched(pc *conversation.PendingCall) bool {
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
func checkSeedHistory(t *testing.T, c *conversation.State) {
	t.Helper()
	if c.Status != conversation.StatusCompleted {
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
	c = waitCall(t, o, c.ID, "update_file_dotenv", "the approval dispatched and its repeat seen", func(pc *conversation.PendingCall) bool {
		return isDispatched(pc) && pc.Duplicates == 1
	})
	waitPublishedCount(t, o, published+1)
	pc := pendingCall(t, c, "update_file_dotenv")
	if pc.Reply != nil || pc.Approval.By != "bot" || pc.Published {
		t.Errorf("dispatched call %+v, want pending, unmarked, approved by bot", pc)
	}
	// Whoever watches the events learns the call went to the workers.
	evs := collectEvents(t, b, c.ID, func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(ev wire.Event) bool { return ev.Type == orchestrator.EventCallDispatched })
	})
	for _, ev := range evs {
		if ev.Type != orchestrator.EventCallDispatched {
			continue
		}
		var sent wire.PendingCall
		if err := json.Unmarshal(ev.Data, &sent); err != nil || ev.ToolCallID != "update_file_dotenv" || sent.Kind != "call" ||
			sent.RunID != c.Batch.RunID || !sent.Deadline.Equal(pc.Deadline) {
			t.Errorf("call_dispatched %s %s: %+v %v; want the call of run %s, kind call, deadline %v", ev.ToolCallID, ev.Data, sent, err, c.Batch.RunID, pc.Deadline)
		}
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
	waitCall(t, o, c.ID, "update_file_dotenv", "the pass to mark the dispatched call", func(pc *conversation.PendingCall) bool { return pc.Published })
	if p := o.Stats().Published.Load() - published; p != 1 {
		t.Errorf("%d publications after the pass, want the dispatch's one", p)
	}

	sandbox := e.worker()
	decide(t, b, c, "delete_file", "deny", false, "Deleting files is not allowed")
	checkSeedHistory(t, waitStatus(t, o, c.ID, conversation.StatusCompleted, conversation.StatusFailed))
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
	if c, err := o.Conversation(ctxT(t), c.ID); err != nil || c.Status != conversation.StatusPaused {
		t.Fatalf("before the pass: %v %s", err, describe(c))
	}

	clock.step(30 * time.Second)
	if err := o.Reconcile(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if p := o.Stats().Published.Load() - published; p != 1 {
		t.Errorf("the pass published %d calls, want the dispatched one", p)
	}
	checkSeedHistory(t, waitStatus(t, o, c.ID, conversation.StatusCompleted, conversation.StatusFailed))
	if env, err := os.ReadFile(filepath.Join(sandbox, ".env")); err != nil || len(env) != 0 {
		t.Errorf(".env = %q, %v; want written empty by the worker", env, err)
	}
}

// A call approved with edited args that fit its tool's schema goes to the
// workers with them when its decision is applied (D24), and its decision
// keeps them; a prompt given while the batch waited comes after every
// result, as the model reads them. Edited args that do not fit are left to
// the follow-up, which makes them a retry prompt and runs nothing.
func TestEditedApprovalDispatchedWhenValid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, edited string
		want         string
	}{
		{"valid", `{"path":".env","content":"A=1"}`, "delete_file denied, update_file_readme success, update_file_dotenv success, prompt"},
		{"invalid", `{"path":".env","content":7}`, "delete_file denied, update_file_readme success, update_file_dotenv retry, prompt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			sandbox := e.worker()
			o, _ := e.orch(orchestrator.Config{})
			c := startPaused(t, o)
			if _, err := o.StartRun(ctxT(t), "Now create a backup of README.md", c.ID); err != nil {
				t.Fatal(err)
			}
			b := e.connect("test")
			decide(t, b, c, "delete_file", "deny", false, "Deleting files is not allowed")
			publishRaw(t, b, decisionSubject(t, c.Batch.RunID), "approve-edited", wire.Decision{
				RunID: c.Batch.RunID, ToolCallID: "update_file_dotenv", ArgsDigest: pendingCall(t, c, "update_file_dotenv").ArgsDigest,
				Approved: true, OverrideArgs: []byte(tc.edited), ApproverID: "bot", DecidedAt: time.Now().UTC(),
			})
			c = waitStatus(t, o, c.ID, conversation.StatusCompleted, conversation.StatusFailed)
			if c.Status != conversation.StatusCompleted || len(c.Runs) != 2 {
				t.Fatalf("%s; want completed in two runs", describe(c))
			}
			var got []string
			for _, m := range c.History {
				if m.RunID != c.Runs[1].RunID {
					continue
				}
				for _, p := range m.Parts {
					switch p.Kind {
					case "user-prompt":
						got = append(got, "prompt")
					case "tool-return":
						got = append(got, p.ToolCallID+" "+string(p.Outcome))
					case "retry-prompt":
						got = append(got, p.ToolCallID+" retry")
					}
				}
			}
			if strings.Join(got, ", ") != tc.want {
				t.Errorf("the follow-up's request holds %q, want %q", strings.Join(got, ", "), tc.want)
			}
			env, err := os.ReadFile(filepath.Join(sandbox, ".env"))
			switch {
			case tc.name == "valid" && (err != nil || string(env) != "A=1"):
				t.Errorf(".env = %q, %v; want the edited content", env, err)
			case tc.name == "invalid" && err == nil:
				t.Errorf(".env = %q; want no run of the invalid args", env)
			}
			for _, d := range c.Decisions {
				if d.ToolCallID == "update_file_dotenv" && string(d.OverrideArgs) != tc.edited {
					t.Errorf("decision %+v, want the edited args kept", d)
				}
			}
		})
	}
}

// A prompt given while a batch waits, whose follow-up runs an approved
// in-process tool that then defers its call (D26), waits for the follow-up
// that has that call's result, and comes after it in the history, as the
// model reads them; it used to be stored ahead of the result.
func TestPromptFollowsTheResultOfACallDeferredAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gate, err := agent.NewRawTool(agent.ToolDef{Name: "gate", Parameters: json.RawMessage(`{"type":"object"}`)},
		func(rc *agent.RunContext, _ json.RawMessage) (any, error) {
			if !rc.ToolCallApproved {
				return nil, deferred.ApprovalRequired(nil)
			}
			return nil, deferred.CallDeferred(nil)
		})
	if err != nil {
		t.Fatal(err)
	}
	model := agent.FunctionModel("gated", func(_ context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
		last := req.Messages[len(req.Messages)-1]
		if slices.ContainsFunc(last.Parts, func(p agent.Part) bool { return p.Kind == agent.PartToolReturn }) {
			return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: "done"}}}, nil
		}
		return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartToolCall, ToolName: "gate", ToolCallID: "g1", Args: json.RawMessage(`{}`)}}}, nil
	})
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: model, Tools: []agent.Tool{gate}})
	info, err := o.StartRun(ctxT(t), "go", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusPaused)
	const prompt = "and then?"
	if _, err := o.StartRun(ctxT(t), prompt, c.ID); err != nil {
		t.Fatal(err)
	}
	b := e.connect("test")
	decide(t, b, c, "g1", "approve", true, "")
	first := c.Batch.RunID
	c = waitCall(t, o, c.ID, "g1", "the approved call deferred again", func(pc *conversation.PendingCall) bool {
		return pc.Kind == deferred.KindCall && pc.Reply == nil
	})
	if c.Batch.RunID == first || c.Batch.Prompt != prompt || pendingCall(t, c, "g1").Approval != nil {
		t.Fatalf("batch of run %s with prompt %q; want a new batch holding the prompt, the call not dispatched: %s", c.Batch.RunID, c.Batch.Prompt, describe(c))
	}
	publishResult(t, b, c.Batch.RunID, "g1", "result-g1")
	c = waitStatus(t, o, c.ID, conversation.StatusCompleted, conversation.StatusFailed)
	var got []string
	for _, m := range c.History {
		for _, p := range m.Parts {
			switch p.Kind {
			case agent.PartUserPrompt:
				got = append(got, "prompt "+p.Content)
			case agent.PartToolReturn:
				got = append(got, "return "+p.ToolCallID)
			}
		}
	}
	if want := "prompt go, return g1, prompt " + prompt; strings.Join(got, ", ") != want || len(c.Runs) != 3 {
		t.Errorf("%d runs, history %q; want 3 runs, %q", len(c.Runs), strings.Join(got, ", "), want)
	}
}
