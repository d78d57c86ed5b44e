package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// loopModel calls calculate_answer until it has seen calls results, then
// answers with what it saw; seen reports the results' outcomes and
// messages.
func loopModel(calls int, answer func(returns []agent.Part) string) agent.Model {
	return agent.FunctionModel("loop", func(_ context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
		var returns []agent.Part
		for _, m := range req.Messages {
			for _, p := range m.Parts {
				if p.Kind == agent.PartToolReturn || p.Kind == agent.PartRetryPrompt {
					returns = append(returns, p)
				}
			}
		}
		if len(returns) < calls {
			return agent.ModelResponse{Parts: []agent.Part{{
				Kind: agent.PartToolCall, ToolName: "calculate_answer",
				ToolCallID: fmt.Sprintf("call%d", len(returns)), Args: json.RawMessage(`{"question":"q"}`),
			}}}, nil
		}
		return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: answer(returns)}}}, nil
	})
}

// bigWorker answers every calculate_answer call with a string value of n
// bytes.
func bigWorker(t *testing.T, e *env, n int) {
	t.Helper()
	b := e.connect("big-worker")
	value := json.RawMessage(`"` + strings.Repeat("x", n) + `"`)
	s, err := b.ConsumeCalls(ctxT(t), "calculate_answer", bus.ConsumeConfig{}, bus.HandlerFunc[bus.CallRequest](
		func(ctx context.Context, d *bus.Delivery[bus.CallRequest]) error {
			_, err := b.PublishCallReply(ctx, bus.CallReply{RunID: d.Msg.RunID, ToolCallID: d.Msg.ToolCallID, Outcome: bus.OutcomeReturn, Value: value, WorkerID: "big"})
			return err
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
}

// Results that together outgrow the store's limit (the server's max
// payload) never leave the conversation waiting: those that no longer fit
// reach the model as failed results saying so, and the conversation
// completes.
func TestResultsOverStoreLimitReachModelAsFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	bigWorker(t, e, 200<<10)
	const calls = 8 // 1.6 MB of results against a 1 MiB max payload
	model := loopModel(calls, func(returns []agent.Part) string {
		failed := 0
		for _, p := range returns {
			if p.Outcome == agent.OutcomeFailed && strings.Contains(string(p.Value)+p.Content, "result not kept") {
				failed++
			}
		}
		return fmt.Sprintf("%d results, %d not kept", len(returns), failed)
	})
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: model})
	info, err := o.StartRun(ctxT(t), "loop", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, orchestrator.StatusCompleted, orchestrator.StatusFailed)
	if c.Status != orchestrator.StatusCompleted {
		t.Fatalf("status %s: %s", c.Status, c.Error)
	}
	var total, notKept int
	if _, err := fmt.Sscanf(c.Output, "%d results, %d not kept", &total, &notKept); err != nil {
		t.Fatalf("output %q: %v", c.Output, err)
	}
	if total != calls || notKept == 0 || notKept == calls {
		t.Errorf("the model saw %d results, %d of them failed as not kept; want %d, some but not all", total, notKept, calls)
	}
}

// A run whose end alone would not fit fails with the reason, rather than
// being retried forever.
func TestRunOverStoreLimitFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	huge := agent.FunctionModel("huge", func(context.Context, agent.ModelRequest) (agent.ModelResponse, error) {
		return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: strings.Repeat("y", 2<<20)}}}, nil
	})
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: huge})
	info, err := o.StartRun(ctxT(t), "say a lot", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, orchestrator.StatusCompleted, orchestrator.StatusFailed)
	if c.Status != orchestrator.StatusFailed || !strings.Contains(c.Error, "over the store's limit") {
		t.Fatalf("status %s, error %q; want failed over the store's limit", c.Status, c.Error)
	}
}
