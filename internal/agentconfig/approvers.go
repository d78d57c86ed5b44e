package agentconfig

import (
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/rule"
)

// approversRule is a tool's `approvers: {rule: EXPR}` compiled
// (orchestrator.ApproverRule): the dialect of an approval rule, with the
// decider besides the call and the run's context.
type approversRule struct{ rule *rule.Rule }

func compileApprovers(expr string) (orchestrator.ApproverRule, error) {
	r, err := rule.Compile(expr)
	if err != nil {
		return nil, fmt.Errorf("CEL %q: %w", expr, err)
	}
	return &approversRule{rule: r}, nil
}

// Admits reports whether d may decide a call of tool with args in rc. It
// fails closed: what cannot be decoded or evaluated admits no one, and the
// error says why.
func (r *approversRule) Admits(d orchestrator.Decider, tool string, args json.RawMessage, rc orchestrator.RuleContext) (bool, error) {
	fail := func(what string, err error) (bool, error) {
		return false, fmt.Errorf("approvers rule %q: %s: %w", r.rule, what, err)
	}
	a, err := rule.DecodeObject(args)
	if err != nil {
		return fail("args", err)
	}
	m, err := rule.DecodeObject(rc.Metadata)
	if err != nil {
		return fail("metadata", err)
	}
	caller, err := rule.DecodeObject(rc.Caller)
	if err != nil {
		return fail("caller", err)
	}
	calls := make([]rule.Call, len(rc.Calls))
	for i, c := range rc.Calls {
		calls[i] = rule.Call{Tool: c.Tool, Outcome: c.Outcome}
	}
	ok, err := r.rule.EvalIn(tool, a, m, rule.Context{Caller: caller,
		Conversation: rule.Conversation(rc.ConversationID, rc.Agent, rc.Runs, calls),
		Decider:      rule.Decider(d.ID, d.Roles, d.Key)})
	if err != nil {
		return false, fmt.Errorf("approvers rule %q: %w", r.rule, err)
	}
	return ok, nil
}
