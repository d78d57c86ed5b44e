package orchestrator_test

import (
	"encoding/json"
	"testing"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// payments' pay needs approval unless the caller is an admin or the
// conversation has looked the account up already (docs/rules.md).
const paymentsAgent = `
name: payments
model: {provider: test}
tools:
  - name: pay
    executor: frontend
    parameters: {type: object}
    approval: >-
      !(has(caller.role) && caller.role == "admin") &&
      !conversation.calls.exists(c, c.tool == "lookup" && c.outcome == "success") &&
      conversation.agent == "payments" && conversation.runs == 1
`

// An approval rule over caller and conversation decides at the
// orchestrator, when the model calls the tool: the same call of pay is
// asked about for a clerk, goes straight out for an admin, and for anyone
// once the conversation has looked the account up.
func TestApprovalRuleOverCallerAndConversation(t *testing.T) {
	t.Parallel()
	cfg, err := agentconfig.Parse([]byte(paymentsAgent), nil)
	if err != nil {
		t.Fatal(err)
	}
	lookup, err := agent.NewTool("lookup", "Look an account up.", func(rc *agent.RunContext, a struct {
		Key string `json:"key"`
	}) (string, error) {
		return "account " + a.Key, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	const direct = "- calls:\n  - {tool: pay, id: p1, args: {cents: 5}}\n- text: done\n"
	const afterLookup = "- calls:\n  - {tool: lookup, id: l1, args: {key: acct}}\n- calls:\n  - {tool: pay, id: p1, args: {cents: 5}}\n- text: done\n"
	for _, tc := range []struct {
		name, caller, script string
		want                 deferred.Kind
	}{
		{"a clerk", `{"id":"bob","role":"clerk"}`, direct, deferred.KindApproval},
		{"no caller", "", direct, deferred.KindApproval},
		{"an admin", `{"id":"ann","role":"admin"}`, direct, deferred.KindCall},
		{"after a lookup", `{"id":"bob","role":"clerk"}`, afterLookup, deferred.KindCall},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			o, _ := e.orch(orchestrator.Config{Agent: cfg, Model: scriptModel(t, tc.script), Tools: []agent.Tool{lookup}})
			info, err := o.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: "pay", Caller: json.RawMessage(tc.caller)})
			if err != nil {
				t.Fatal(err)
			}
			c := waitStatus(t, o, info.ConversationID, conversation.StatusPaused, conversation.StatusFailed, conversation.StatusCompleted)
			if c.Status != conversation.StatusPaused {
				t.Fatalf("%s", describe(c))
			}
			if pc := pendingCall(t, c, "p1"); pc.Kind != tc.want {
				t.Errorf("pay pending as %s, want %s", pc.Kind, tc.want)
			}
		})
	}
}
