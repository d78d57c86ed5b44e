package approver

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/internal/rule"
	"github.com/toolgate/toolgate/wire"
)

// NotAdmittedError says the orchestrator would refuse an approver's
// decision on a request, as the request itself tells (its approvers and
// may_not_approve, which the orchestrator worked out from the agent
// config): the decision is not sent, and the request is left to the
// approvers it names.
type NotAdmittedError struct {
	RunID, ToolCallID string
	Reason            string
}

func (e *NotAdmittedError) Error() string {
	return fmt.Sprintf("decision on %s/%s refused: %s", e.RunID, e.ToolCallID, e.Reason)
}

// Admit reports whether approver id may decide req: nil when the
// orchestrator would take its decision, one that approves the call when
// approve is set, else a denial; a *NotAdmittedError when it would refuse
// it. The orchestrator checks the same (besides the signature) when the
// decision comes; this lets an inbox or a bot show and decide only the
// calls it may, rather than learn of a refusal after it sent one.
func Admit(req wire.ApprovalRequest, id string, approve bool) error {
	if req.ApproversRule != "" {
		if reason := ruleRefuses(req, id); reason != "" {
			return &NotAdmittedError{RunID: req.RunID, ToolCallID: req.ToolCallID, Reason: reason}
		}
	} else if len(req.Approvers) > 0 && !slices.Contains(req.Approvers, id) {
		return &NotAdmittedError{RunID: req.RunID, ToolCallID: req.ToolCallID,
			Reason: fmt.Sprintf("approver %q may not decide tool %s (approvers: %s)", id, req.ToolName, strings.Join(req.Approvers, ", "))}
	}
	if approve && slices.Contains(req.MayNotApprove, id) {
		return &NotAdmittedError{RunID: req.RunID, ToolCallID: req.ToolCallID,
			Reason: fmt.Sprintf("approver %q is the run's caller: it may not approve its own call", id)}
	}
	return nil
}

// ruleRefuses says why req's approvers rule does not admit approver id;
// "" when it does, or when it cannot tell (the rule does not compile here,
// or reads what the request does not carry): the orchestrator then judges
// the decision. Once req is escalated, its escalation group is admitted as
// the orchestrator admits it.
func ruleRefuses(req wire.ApprovalRequest, id string) string {
	var roles []string
	for role, members := range req.Roles {
		if slices.Contains(members, id) {
			roles = append(roles, role)
		}
	}
	slices.Sort(roles)
	for _, to := range req.EscalatedTo {
		if to == id || slices.Contains(roles, to) {
			return ""
		}
	}
	r, err := approversRule(req.ApproversRule)
	if err != nil {
		return ""
	}
	args, err1 := rule.DecodeObject(req.Args)
	meta, err2 := rule.DecodeObject(req.Metadata)
	caller, err3 := rule.DecodeObject(req.Caller)
	if err1 != nil || err2 != nil || err3 != nil {
		return ""
	}
	decider := rule.Decider(id, roles, "")
	// The approver's trusted key is the orchestrator's to know.
	delete(decider, "key")
	ok, err := r.EvalIn(req.ToolName, args, meta, rule.Context{Caller: caller, Decider: decider})
	if err != nil || ok {
		return ""
	}
	return fmt.Sprintf("approver %q may not decide tool %s (approvers rule: %s)", id, req.ToolName, req.ApproversRule)
}

// approversRules caches the approvers rules compiled, by expression: an agent
// config has few, and compiling one per card shown would be costly. It
// stops growing at maxRules (what requests carry is then compiled each
// time).
var approversRules = struct {
	sync.Mutex
	m map[string]*rule.Rule
}{m: map[string]*rule.Rule{}}

const maxRules = 256

func approversRule(expr string) (*rule.Rule, error) {
	approversRules.Lock()
	r, ok := approversRules.m[expr]
	approversRules.Unlock()
	if ok {
		return r, nil
	}
	r, err := rule.Compile(expr)
	if err != nil {
		return nil, err
	}
	approversRules.Lock()
	if len(approversRules.m) < maxRules {
		approversRules.m[expr] = r
	}
	approversRules.Unlock()
	return r, nil
}
