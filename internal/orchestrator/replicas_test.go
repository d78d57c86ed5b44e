package orchestrator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// Two orchestrators on one server share the replies: every batch completes
// once and gets exactly one follow-up, whichever replica applied its reply
// (D35).
func TestTwoReplicasFollowUpOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker("calculate_answer")
	cfg := externalAgent(t, "")
	o1, _ := e.orch(orchestrator.Config{Agent: cfg, InstanceID: "one"})
	o2, _ := e.orch(orchestrator.Config{Agent: cfg, InstanceID: "two"})
	const n = 12
	var ids []string
	for i := range n {
		o := o1
		if i%2 == 1 {
			o = o2
		}
		info, err := o.StartRun(ctxT(t), "What is the answer?", "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ConversationID)
	}
	for _, id := range ids {
		c := waitStatus(t, o1, id, conversation.StatusCompleted, conversation.StatusFailed)
		if c.Status != conversation.StatusCompleted {
			t.Fatalf("%s: %s", id, c.Error)
		}
		if len(c.Runs) != 2 {
			t.Errorf("%s: runs %+v, want 2", id, c.Runs)
		}
	}
	// A follow-up stored with its claim is visible before its reply is
	// acknowledged and counted: the counts are waited for, then held.
	counts := func() (int64, int64) {
		return o1.Stats().FollowUps.Load() + o2.Stats().FollowUps.Load(), o1.Stats().RepliesApplied.Load() + o2.Stats().RepliesApplied.Load()
	}
	waitFor(t, "every reply to be counted", func() (bool, string) {
		f, a := counts()
		return a >= n, fmt.Sprintf("follow-ups %d, replies applied %d", f, a)
	})
	if f, a := counts(); f != n || a != n {
		t.Errorf("follow-ups = %d, replies applied = %d, want %d each", f, a, n)
	}
}

// An orchestrator that stops while its conversation is paused loses
// nothing: the reply that comes while no orchestrator runs is applied by
// the next one, which launches the follow-up.
func TestRestartMidBatchResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := externalAgent(t, "")
	o1, stop1 := e.orch(orchestrator.Config{Agent: cfg, InstanceID: "first"})
	info, err := o1.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	waitPublished(t, o1, info.ConversationID, 1)
	stop1()
	e.worker("calculate_answer")
	o2, _ := e.orch(orchestrator.Config{Agent: cfg, InstanceID: "second"})
	c := waitStatus(t, o2, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || len(c.Runs) != 2 {
		t.Fatalf("status %s (%s), runs %+v", c.Status, c.Error, c.Runs)
	}
	if o2.Stats().FollowUps.Load() != 1 {
		t.Errorf("the restarted orchestrator launched %d follow-ups, want 1", o2.Stats().FollowUps.Load())
	}
}

// A run interrupted by shutdown is relaunched by the next orchestrator with
// the same run id.
func TestInterruptedRunRelaunched(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := externalAgent(t, "")
	blocking, entered := blockingModel()
	o1, _ := e.orch(orchestrator.Config{Agent: cfg, Model: blocking, InstanceID: "first", LeaseTTL: time.Hour})
	info := startInModel(t, o1, entered)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := o1.Stop(ctx); err == nil {
		t.Error("stop with a run still going returned no error")
	}
	c, err := o1.Conversation(ctxT(t), info.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != conversation.StatusRunning || c.Lease == nil || !c.Lease.Until.IsZero() {
		t.Fatalf("after shutdown: status %s, lease %+v; want running with a released lease", c.Status, c.Lease)
	}

	e.worker("calculate_answer")
	o2, _ := e.orch(orchestrator.Config{Agent: cfg, InstanceID: "second"})
	c = waitStatus(t, o2, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted {
		t.Fatalf("status %s: %s", c.Status, c.Error)
	}
	if c.Runs[0].RunID != info.RunID || len(c.Runs) != 2 {
		t.Errorf("runs %+v; want %s relaunched, then one follow-up", c.Runs, info.RunID)
	}
	if o2.Stats().RunsRelaunched.Load() != 1 {
		t.Errorf("relaunched %d runs, want 1", o2.Stats().RunsRelaunched.Load())
	}
}

// A call that expires while no orchestrator runs is settled by the next
// one at start, which then launches the follow-up (D37).
func TestExpiredWhileDownSettledAtStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := externalAgent(t, "    deadline: 300ms\n")
	o1, stop1 := e.orch(orchestrator.Config{Agent: cfg, InstanceID: "first"})
	info, err := o1.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitPublished(t, o1, info.ConversationID, 1)
	stop1()
	deadline := pendingCall(t, c, "pyd_ai_tool_call_id").Deadline
	waitFor(t, "the deadline to pass", func() (bool, string) { return time.Now().After(deadline), "" })

	o2, _ := e.orch(orchestrator.Config{Agent: cfg, InstanceID: "second"})
	c = waitStatus(t, o2, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted {
		t.Fatalf("status %s: %s", c.Status, c.Error)
	}
	var failed bool
	for _, m := range c.History {
		for _, p := range m.Parts {
			failed = failed || (p.ToolCallID == "pyd_ai_tool_call_id" && p.Outcome == "failed" && strings.Contains(string(p.Value), "timed out"))
		}
	}
	if !failed {
		t.Errorf("history lacks the timed-out call")
	}
}
