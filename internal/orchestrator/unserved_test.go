package orchestrator_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// A call of a tool no worker takes is told on its conversation (a
// tool_unserved event with the tool, the reason and the deadline) instead
// of waiting silently for its deadline; once a worker comes the call is
// taken and the conversation completes.
func TestToolUnservedIsTold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, "")})
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	evs := collectEvents(t, e.connect("events"), info.ConversationID, hasEvent(orchestrator.EventToolUnserved, ""))
	ev, _ := event(evs, orchestrator.EventToolUnserved, "")
	d := eventData(t, ev)
	if d["tool"] != "calculate_answer" || !strings.Contains(d["reason"].(string), "no worker takes calls of calculate_answer") || ev.ToolCallID == "" {
		t.Errorf("tool_unserved event %s data %v", ev.ToolCallID, d)
	}
	if n := o.Stats().UnservedCalls.Load(); n != 1 {
		t.Errorf("UnservedCalls %d, want 1", n)
	}
	c := pendingCall(t, waitPublished(t, o, info.ConversationID, 1), ev.ToolCallID)
	if dl, err := time.Parse(time.RFC3339Nano, d["deadline"].(string)); err != nil || !dl.Equal(c.Deadline) {
		t.Errorf("deadline %v (%v), want the call's %v", d["deadline"], err, c.Deadline)
	}

	e.worker("calculate_answer")
	if c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed); c.Status != conversation.StatusCompleted {
		t.Fatalf("once a worker came: %s", describe(c))
	}
}

// A tool whose worker pulls its calls gets no tool_unserved event.
func TestToolServedIsNotTold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker("calculate_answer")
	b := e.connect("look")
	bustest.Poll(t, bustest.Timeout, "the worker pulls calls of calculate_answer", func() (bool, string) {
		waiting, unacked, err := b.CallTakers(ctxT(t), "calculate_answer")
		return err == nil && waiting > 0, fmt.Sprintf("waiting %d unacked %d err %v", waiting, unacked, err)
	})
	o, stop := e.orch(orchestrator.Config{Agent: externalAgent(t, "")})
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	if c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed); c.Status != conversation.StatusCompleted {
		t.Fatalf("%s", describe(c))
	}
	// Stop waits for the looks under way.
	stop()
	if n := o.Stats().UnservedCalls.Load(); n != 0 {
		t.Errorf("%d calls told unserved although a worker pulled them", n)
	}
}
