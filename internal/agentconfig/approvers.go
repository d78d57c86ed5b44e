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
	a, m, ctx, what, err := ruleInputs(args, rc)
	if err != nil {
		return false, fmt.Errorf("approvers rule %q: %s: %w", r.rule, what, err)
	}
	ctx.Decider = rule.Decider(d.ID, d.Roles, d.Key)
	ok, err := r.rule.EvalIn(tool, a, m, ctx)
	if err != nil {
		return false, fmt.Errorf("approvers rule %q: %w", r.rule, err)
	}
	return ok, nil
}
