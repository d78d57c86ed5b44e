package agentconfig

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/rule"
)

// approvalRule decides whether a call of a tool needs a decision first
// (orchestrator.ApprovalRule).
// Its expression is in the dialect of package rule, the same as an
// approver policy's `when:`, so an expression over the model's args decides
// alike at both gates. At the orchestrator it also sees the run's context
// (RequiredIn, docs/rules.md).
type approvalRule struct {
	always bool
	rule   *rule.Rule
}

// compileApproval compiles an approval: never (nil), always or a CEL
// expression.
func compileApproval(s string) (orchestrator.ApprovalRule, error) {
	switch strings.TrimSpace(s) {
	case "", ApprovalNever:
		return nil, nil
	case ApprovalAlways:
		return &approvalRule{always: true}, nil
	}
	r, err := rule.Compile(s)
	if err != nil {
		return nil, fmt.Errorf("CEL %q: %w", s, err)
	}
	return &approvalRule{rule: r}, nil
}

// Required reports whether a call with these args needs a decision. It fails
// closed: args that cannot be decoded, an evaluation error (a missing key, a
// wrong type, the cost limit) or a non-bool result all mean approval is
// required, and the error says why.
func (r *approvalRule) Required(tool string, args json.RawMessage) (bool, error) {
	if r.always {
		return true, nil
	}
	b, err := r.rule.Eval(tool, args, nil)
	if err != nil {
		return true, fmt.Errorf("approval rule %q: %w", r.rule, err)
	}
	return b, nil
}

// RequiredIn is Required with the run's context: caller, conversation
// and metadata (docs/rules.md). It fails closed as Required does.
func (r *approvalRule) RequiredIn(tool string, args json.RawMessage, rc orchestrator.RuleContext) (bool, error) {
	if r.always {
		return true, nil
	}
	a, m, ctx, what, err := ruleInputs(args, rc)
	if err != nil {
		return true, fmt.Errorf("approval rule %q: %s: %w", r.rule, what, err)
	}
	b, err := r.rule.EvalIn(tool, a, m, ctx)
	if err != nil {
		return true, fmt.Errorf("approval rule %q: %w", r.rule, err)
	}
	return b, nil
}

// ruleInputs decodes what a rule over a call sees: its args, the tool's
// metadata and the run's caller and conversation. On an error, what names
// the part that failed.
func ruleInputs(args json.RawMessage, rc orchestrator.RuleContext) (a, m map[string]any, ctx rule.Context, what string, err error) {
	if a, err = rule.DecodeObject(args); err != nil {
		return nil, nil, ctx, "args", err
	}
	if m, err = rule.DecodeObject(rc.Metadata); err != nil {
		return nil, nil, ctx, "metadata", err
	}
	if ctx.Caller, err = rule.DecodeObject(rc.Caller); err != nil {
		return nil, nil, ctx, "caller", err
	}
	calls := make([]rule.Call, len(rc.Calls))
	for i, c := range rc.Calls {
		calls[i] = rule.Call{Tool: c.Tool, Outcome: c.Outcome}
	}
	ctx.Conversation = rule.Conversation(rc.ConversationID, rc.Agent, rc.Runs, calls)
	return a, m, ctx, "", nil
}
