package agentconfig

import (
	"encoding/json"
	"testing"

	"github.com/toolgate/toolgate/internal/orchestrator"
)

// The variables docs/rules.md documents reach an approval rule at the
// orchestrator: caller, conversation (id, agent, runs, tools, calls) and
// metadata (the tool's approval_metadata).
func TestApprovalRuleSeesTheRunsContext(t *testing.T) {
	t.Parallel()
	rc := orchestrator.RuleContext{
		Caller:         json.RawMessage(`{"id":"ann","role":"clerk","limit":100}`),
		Metadata:       json.RawMessage(`{"reason":"protected"}`),
		ConversationID: "c1", Agent: "files", Runs: 2,
		Calls: []orchestrator.RuleCall{{Tool: "read_file", Outcome: "success"}, {Tool: "delete_file", Outcome: "denied"}, {Tool: "update_file"}},
	}
	for _, tc := range []struct {
		expr string
		want bool
	}{
		{`caller.role == "clerk"`, true},
		{`caller.limit < args.amount`, true},
		{`has(caller.admin) && caller.admin`, false},
		{`conversation.id == "c1" && conversation.agent == "files"`, true},
		{`conversation.runs > 1`, true},
		{`"read_file" in conversation.tools`, true},
		{`"write_file" in conversation.tools`, false},
		{`conversation.calls.exists(c, c.tool == "delete_file" && c.outcome == "denied")`, true},
		{`conversation.calls.filter(c, c.outcome == "").size() == 1`, true},
		{`metadata.reason == "protected"`, true},
	} {
		r, err := compileApproval(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		got, err := r.(orchestrator.ContextRule).RequiredIn("update_file", json.RawMessage(`{"amount":500}`), rc)
		if err != nil || got != tc.want {
			t.Errorf("%s = %v, %v; want %v", tc.expr, got, err, tc.want)
		}
	}
	// Without a caller the map is empty: has() works, a missing key fails
	// closed (approval required).
	r, _ := compileApproval(`caller.role == "admin"`)
	if got, err := r.(orchestrator.ContextRule).RequiredIn("t", nil, orchestrator.RuleContext{}); !got || err == nil {
		t.Errorf("a key of a missing caller: %v, %v; want required with an error", got, err)
	}
}
