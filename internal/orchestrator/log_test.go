package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
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
	s, err := b.ConsumeCalls(ctxT(t), "calculate_answer", bus.ConsumeConfig{}, bus.HandlerFunc[wire.CallRequest](
		func(ctx context.Context, d *bus.Delivery[wire.CallRequest]) error {
			_, err := b.PublishCallReply(ctx, wire.CallReply{RunID: d.Msg.RunID, ToolCallID: d.Msg.ToolCallID, Outcome: wire.OutcomeReturn, Value: value, WorkerID: "big"})
			return err
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
}

// A conversation whose history passes the max payload many times over
// (32 results of 180 KiB, about 5.6 MiB) completes with every result
// kept, and what the store writes per call does not grow with the
// conversation: the whole run writes about its history once, not once per
// change (each result is written twice: as its call's reply, and in the
// history of the follow-up run; rewriting the state at each change, as a
// single stored value would, writes it about calls/2 times). A replica that
// never saw it reads it back whole from its log.
func TestLongConversationKeepsEveryResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const size, calls = 180 << 10, 32
	bigWorker(t, e, size)
	model := loopModel(calls, func(returns []agent.Part) string {
		kept := 0
		for _, p := range returns {
			if p.Outcome != agent.OutcomeFailed && len(p.Value) >= size {
				kept++
			}
		}
		return fmt.Sprintf("%d results, %d kept", len(returns), kept)
	})
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: model})
	info, err := o.StartRun(ctxT(t), "loop", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if want := fmt.Sprintf("%d results, %d kept", calls, calls); c.Status != conversation.StatusCompleted || c.Output != want {
		t.Fatalf("status %s, output %q, error %q; want completed, %q", c.Status, c.Output, c.Error, want)
	}
	history := int64(calls * size)
	if written := o.Stats().StateBytes.Load(); written > history*5/2 {
		t.Errorf("the store wrote %d bytes for %d bytes of results: more than twice over", written, history)
	}
	o2, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: model, InstanceID: "reader"})
	c2, err := o2.Conversation(ctxT(t), info.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Output != c.Output || len(c2.History) != len(c.History) || len(c2.Runs) != calls+1 {
		t.Errorf("read back: output %q, %d messages, %d runs; want %q, %d, %d", c2.Output, len(c2.History), len(c2.Runs), c.Output, len(c.History), calls+1)
	}
}

// A run whose end alone is over the max payload is stored, in parts
// written atomically, and read back whole.
func TestRunOverMaxPayloadIsStoredInParts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	text := strings.Repeat("y", 2<<20)
	huge := agent.FunctionModel("huge", func(context.Context, agent.ModelRequest) (agent.ModelResponse, error) {
		return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: text}}}, nil
	})
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: huge})
	info, err := o.StartRun(ctxT(t), "say a lot", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || c.Output != text {
		t.Fatalf("status %s, error %q, output of %d bytes; want completed with %d", c.Status, c.Error, len(c.Output), len(text))
	}
	o2, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Model: huge, InstanceID: "reader"})
	c2, err := o2.Conversation(ctxT(t), info.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Status != conversation.StatusCompleted || c2.Output != text {
		t.Errorf("read back: status %s, output of %d bytes", c2.Status, len(c2.Output))
	}
}
