package approver_test

import (
	"testing"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// A bot that a request's approvers do not name leaves it to them, with no
// decision (the orchestrator would refuse it); one they name decides.
func TestApproverLeavesCallsOfOthers(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	pol, err := approver.ParsePolicy([]byte("rules:\n  - action: approve\n"))
	if err != nil {
		t.Fatal(err)
	}
	events := runApprover(t, approver.Config{Bus: b, ID: "bot", Policy: pol})
	others := approvalRequest(t, "run-o", "c1", "x", `{}`)
	others.Approvers = []string{"ann", "bob"}
	ours := approvalRequest(t, "run-b", "c2", "x", `{}`)
	ours.Approvers = []string{"ann", "bot"}
	publish(t, b, others, ours)
	if h := next(t, events); h.req.ToolCallID != "c1" || h.outcome != approver.OutcomeEscalated {
		t.Fatalf("first: %s %s, want c1 left to its approvers", h.req.ToolCallID, h.outcome)
	}
	if h := next(t, events); h.req.ToolCallID != "c2" || h.outcome != approver.OutcomeApproved {
		t.Fatalf("second: %s %s, want c2 approved", h.req.ToolCallID, h.outcome)
	}
	if got := bustest.Decisions(t, b, "run-o"); len(got) != 0 {
		t.Errorf("a call of others got decisions %+v", got)
	}
}
