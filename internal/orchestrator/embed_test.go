package orchestrator_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

type payArgs struct {
	Cents int `json:"cents"`
}

// embeddedTools are a program's own Go tools: lookup runs in the run;
// pay asks for approval, from a validator that sees the run's context,
// when the amount is large, and runs in the run once approved.
func embeddedTools(t *testing.T) []agent.Tool {
	t.Helper()
	lookup, err := agent.NewTool("lookup", "Look a key up.", func(rc *agent.RunContext, a struct {
		Key string `json:"key"`
	}) (string, error) {
		return "value of " + a.Key + " in " + rc.ConversationID, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pay, err := agent.NewTool("pay", "Pay an amount.", func(rc *agent.RunContext, a payArgs) (string, error) {
		return "paid", nil
	}, agent.WithValidator(func(rc *agent.RunContext, a payArgs) error {
		if a.Cents > 1000 && !rc.ToolCallApproved {
			return deferred.ApprovalRequired(map[string]any{"reason": "large payment", "earlier_messages": len(rc.Messages)})
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return []agent.Tool{lookup, pay}
}

const embeddedScript = `
- calls:
  - {tool: lookup, id: l1, args: {key: k}}
  - {tool: pay, id: p1, args: {cents: 5000}}
- text: done
`

// besideAgent configures one worker-executed tool, which the script does
// not call, beside the Go tools.
func besideAgent(t *testing.T) *orchestrator.AgentConfig {
	t.Helper()
	cfg, err := agentconfig.Parse([]byte("model: {provider: test}\ntools:\n  - {name: remote_echo, parameters: {type: object}}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// In-process Go tools beside configured ones: the one
// that defers is published for approvers, with the metadata its validator
// computed from the run's context, and runs in the follow-up once approved.
func TestEmbeddedToolsRunInProcessAndDefer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{Agent: besideAgent(t), Model: scriptModel(t, embeddedScript), Tools: embeddedTools(t)})
	info, err := o.StartRun(ctxT(t), "pay", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusPaused)
	pc := pendingCall(t, c, "p1")
	if pc.Kind != "approval" || !strings.Contains(string(pc.Metadata), `"large payment"`) || !strings.Contains(string(pc.Metadata), `"earlier_messages":2`) {
		t.Errorf("p1 pending as %s with metadata %s", pc.Kind, pc.Metadata)
	}
	e.approverBot("bot", "rules:\n  - tool: pay\n    action: approve\n", nil)
	c = waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted {
		t.Fatalf("conversation %s: %s", c.Status, describe(c))
	}
	for id, want := range map[string]string{"l1": "value of k in " + info.ConversationID, "p1": "paid"} {
		p := returnOf(c, id)
		var got string
		if p == nil || json.Unmarshal(p.Value, &got) != nil || got != want {
			t.Errorf("%s returned %+v, want %q", id, p, want)
		}
	}
}

// A custom inline handler answers deferred calls inside the run: nothing
// is published and the run never pauses.
func TestEmbeddedInlineHandlerSettlesInTheRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	handler := agent.HandlerFunc(func(rc *agent.RunContext, req *deferred.Requests) (*deferred.Results, error) {
		res := &deferred.Results{Approvals: map[string]deferred.Decision{}}
		for _, a := range req.Approvals {
			res.Approvals[a.ToolCallID] = deferred.Denied{Message: "not in " + rc.ConversationID}
		}
		return res, nil
	})
	o, _ := e.orch(orchestrator.Config{Agent: besideAgent(t), Model: scriptModel(t, embeddedScript), Tools: embeddedTools(t),
		Handlers: []agent.Handler{handler}})
	info, err := o.StartRun(ctxT(t), "pay", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed, conversation.StatusPaused)
	if c.Status != conversation.StatusCompleted || len(c.Runs) != 1 {
		t.Fatalf("conversation %s after %d runs: %s", c.Status, len(c.Runs), describe(c))
	}
	if p := returnOf(c, "p1"); p == nil || !strings.Contains(string(p.Value)+p.Content, "not in "+info.ConversationID) {
		t.Errorf("p1 returned %+v, want the handler's denial", p)
	}
}
