package approver_test

import (
	"errors"
	"testing"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
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

// A bot may not approve a call its own run requested when the tool
// forbids self-approval (the request's may_not_approve names it): it
// leaves the call to the others, with no decision; it may still deny one.
func TestApproverLeavesItsOwnCallsToOthers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, policy string
		want         approver.Outcome
		decisions    int
	}{
		{"approve is left", "rules:\n  - action: approve\n", approver.OutcomeEscalated, 0},
		{"deny is sent", "rules:\n  - action: deny\n    message: no\n", approver.OutcomeDenied, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.NewBus(t)
			pol, err := approver.ParsePolicy([]byte(tc.policy))
			if err != nil {
				t.Fatal(err)
			}
			events := runApprover(t, approver.Config{Bus: b, ID: "bot", Policy: pol})
			own := approvalRequest(t, "run-own", "c1", "x", `{}`)
			own.MayNotApprove = []string{"bot"}
			publish(t, b, own)
			if h := next(t, events); h.req.ToolCallID != "c1" || h.outcome != tc.want {
				t.Fatalf("own call: %s %s, want %s", h.req.ToolCallID, h.outcome, tc.want)
			}
			if got := bustest.Decisions(t, b, "run-own"); len(got) != tc.decisions {
				t.Errorf("decisions %+v, want %d", got, tc.decisions)
			}
		})
	}
}

// Admit judges a decision as the orchestrator would from what the
// request says: its approvers, and who may not approve it.
func TestAdmit(t *testing.T) {
	t.Parallel()
	req := wire.ApprovalRequest{RunID: "r", ToolCallID: "c", ToolName: "deploy", Approvers: []string{"ann", "bob"}, MayNotApprove: []string{"ann"}}
	for _, tc := range []struct {
		name, id string
		approve  bool
		refused  string
	}{
		{"approver approves", "bob", true, ""},
		{"outsider denies", "mallory", false, `approver "mallory" may not decide tool deploy (approvers: ann, bob)`},
		{"outsider approves", "mallory", true, `approver "mallory" may not decide tool deploy (approvers: ann, bob)`},
		{"caller approves", "ann", true, `approver "ann" is the run's caller: it may not approve its own call`},
		{"caller denies", "ann", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := approver.Admit(req, tc.id, tc.approve)
			var na *approver.NotAdmittedError
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != "" && (!errors.As(err, &na) || na.Reason != tc.refused):
				t.Fatalf("got %v, want refused: %s", err, tc.refused)
			}
		})
	}
	if err := approver.Admit(wire.ApprovalRequest{ToolName: "x"}, "anyone", true); err != nil {
		t.Errorf("a request naming no approvers: %v", err)
	}
}

// A request whose tool's approvers are a rule is admitted as the
// orchestrator admits it, from what the request carries: the rule over the
// approver's id and roles and the request's caller; a rule reading what
// the request does not carry (the approver's key, the conversation)
// leaves the request shown; once escalated, its group is admitted.
func TestAdmitByApproversRule(t *testing.T) {
	t.Parallel()
	base := wire.ApprovalRequest{RunID: "r", ToolCallID: "c", ToolName: "deploy", Caller: []byte(`{"id":"ann"}`),
		ApproversRule: `decider.roles.exists(r, r == "sre") && decider.id != caller.id`,
		Roles:         map[string][]string{"sre": {"ann", "bob"}, "managers": {"mia"}}}
	for _, tc := range []struct {
		name, id, rule string
		escalatedTo    []string
		refused        bool
	}{
		{name: "member of the role", id: "bob"},
		{name: "outside the role", id: "mallory", refused: true},
		{name: "the caller, excluded by the rule", id: "ann", refused: true},
		{name: "a rule over the key is left to the orchestrator", id: "mallory", rule: `decider.key != ""`},
		{name: "a rule over the conversation is left to the orchestrator", id: "mallory", rule: `conversation.runs > 1`},
		{name: "the escalation group", id: "mia", escalatedTo: []string{"managers"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := base
			req.EscalatedTo = tc.escalatedTo
			if tc.rule != "" {
				req.ApproversRule = tc.rule
			}
			err := approver.Admit(req, tc.id, false)
			var na *approver.NotAdmittedError
			if tc.refused != errors.As(err, &na) {
				t.Fatalf("Admit(%s) = %v, want refused: %v", tc.id, err, tc.refused)
			}
			if tc.refused && na.Reason != `approver "`+tc.id+`" may not decide tool deploy (approvers rule: `+req.ApproversRule+`)` {
				t.Errorf("reason %q", na.Reason)
			}
		})
	}
}
