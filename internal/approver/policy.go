package approver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/rule"
	"github.com/toolgate/toolgate/wire"
)

// Action is what a policy rule does with a matching request.
type Action string

const (
	ActionApprove  Action = "approve"
	ActionDeny     Action = "deny"
	ActionEscalate Action = "escalate" // leave it to another approver (or the terminal prompt)
)

// PolicyDenyMessage is the message of a deny rule that gives none; it
// says a policy denied, unlike deferred.DefaultDenyMessage, which a
// denial with no message at all reads.
const PolicyDenyMessage = "Denied by policy"

// Rule is one entry of a policy file's `rules:` list.
type Rule struct {
	// Tool is a path.Match glob over the tool name; empty matches any tool.
	Tool string `yaml:"tool"`
	// When is a CEL expression over args, metadata (both map(string, dyn))
	// and tool (string) that must yield a bool; empty is true.
	When   string `yaml:"when"`
	Action Action `yaml:"action"`
	// Message is the denial message; only with deny. Defaults to
	// PolicyDenyMessage.
	Message string `yaml:"message"`
	// OverrideArgs replaces the call's args; only with approve.
	OverrideArgs map[string]any `yaml:"override_args"`
}

// Policy is a compiled, ordered list of rules; the first match wins and no
// match escalates. A Policy is safe for concurrent use.
type Policy struct {
	rules []compiledRule
}

type compiledRule struct {
	Rule
	prog         *rule.Rule // nil when When is empty
	overrideJSON json.RawMessage
}

// Verdict is the outcome of evaluating a policy against one request.
type Verdict struct {
	Action       Action
	Message      string          // set for deny
	OverrideArgs json.RawMessage // set for approve with override_args
	// Metadata, on an approval, is the decision's metadata: a JSON object
	// given to the approved call's tool.
	Metadata json.RawMessage
	// Rule is the index of the matching rule, or -1 when nothing matched.
	Rule int
	// Skipped lists the rules whose expression failed to evaluate for this
	// request; a rule that fails never matches, so an error can only make
	// the outcome more cautious.
	Skipped []*RuleError
}

// RuleError names the rule a load or evaluation problem belongs to.
type RuleError struct {
	Index int // 0-based position in rules:
	// Line and Column (1-based) are where the rule, or the key at fault
	// (when, tool, action, …), is in the policy file; 0 when unknown.
	Line, Column int
	Err          error
}

func (e *RuleError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d, column %d: rule %d: %v", e.Line, e.Column, e.Index, e.Err)
	}
	return fmt.Sprintf("rule %d: %v", e.Index, e.Err)
}
func (e *RuleError) Unwrap() error { return e.Err }

type policyFile struct {
	Rules []Rule `yaml:"rules"`
}

// LoadPolicy reads and compiles a policy file.
func LoadPolicy(file string) (*Policy, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("load policy %s: %w", file, err)
	}
	return p, nil
}

// ParsePolicy compiles a policy from YAML. Every expression is compiled and
// type-checked here, so a policy that loads cannot fail on syntax later.
// Unknown keys are refused: a misspelt `when` would otherwise match
// everything.
func ParsePolicy(data []byte) (*Policy, error) {
	var f policyFile
	if err := yaml.UnmarshalWithOptions(data, &f, yaml.Strict()); err != nil {
		return nil, fmt.Errorf("parse policy: %w", err)
	}
	p := &Policy{rules: make([]compiledRule, 0, len(f.Rules))}
	for i, r := range f.Rules {
		cr, key, err := compileRule(r)
		if err != nil {
			re := &RuleError{Index: i, Err: err}
			re.Line, re.Column = position(data, i, key)
			return nil, re
		}
		p.rules = append(p.rules, cr)
	}
	return p, nil
}

// position is the line and column of rule i of a policy file, or of its
// key when the rule has it; 0, 0 when the file cannot say.
func position(data []byte, i int, key string) (line, col int) {
	file, err := parser.ParseBytes(data, 0)
	if err != nil {
		return 0, 0
	}
	for _, p := range []string{fmt.Sprintf("$.rules[%d].%s", i, key), fmt.Sprintf("$.rules[%d]", i)} {
		if key == "" && strings.HasSuffix(p, ".") {
			continue
		}
		yp, err := yaml.PathString(p)
		if err != nil {
			continue
		}
		n, err := yp.FilterFile(file)
		if err != nil || n == nil {
			continue
		}
		tok := n.GetToken()
		// A mapping's own token is its first colon: its first key is
		// where a reader looks.
		if m, ok := n.(*ast.MappingNode); ok && len(m.Values) > 0 {
			tok = m.Values[0].Key.GetToken()
		}
		if tok != nil {
			return tok.Position.Line, tok.Position.Column
		}
	}
	return 0, 0
}

// compileRule compiles r; an error comes with the key of r at fault ("" for
// the rule as a whole).
func compileRule(r Rule) (compiledRule, string, error) {
	cr := compiledRule{Rule: r}
	if r.Tool != "" {
		if _, err := path.Match(r.Tool, ""); err != nil {
			return cr, "tool", fmt.Errorf("tool %q: %w", r.Tool, err)
		}
	}
	switch r.Action {
	case ActionApprove:
		if r.Message != "" {
			return cr, "message", errors.New("message is only allowed with action deny")
		}
		if r.OverrideArgs != nil {
			b, err := json.Marshal(r.OverrideArgs)
			if err != nil {
				return cr, "override_args", fmt.Errorf("override_args: %w", err)
			}
			cr.overrideJSON = b
		}
	case ActionDeny:
		if r.OverrideArgs != nil {
			return cr, "override_args", errors.New("override_args is only allowed with action approve")
		}
		if cr.Message == "" {
			cr.Message = PolicyDenyMessage
		}
	case ActionEscalate:
		if r.OverrideArgs != nil || r.Message != "" {
			return cr, "action", errors.New("message and override_args are not allowed with action escalate")
		}
	case "":
		return cr, "", errors.New("action is required (approve, deny or escalate)")
	default:
		return cr, "action", fmt.Errorf("unknown action %q (want approve, deny or escalate)", r.Action)
	}
	if strings.TrimSpace(r.When) == "" {
		return cr, "", nil
	}
	prog, err := rule.Compile(r.When)
	if err != nil {
		return cr, "when", fmt.Errorf("when: %w", err)
	}
	cr.prog = prog
	return cr, "", nil
}

// Decide is Evaluate as a Decider: a request the policy cannot evaluate
// (its args are not an object) can never be, so the error is terminal.
func (p *Policy) Decide(_ context.Context, req wire.ApprovalRequest) (Verdict, error) {
	v, err := p.Evaluate(req)
	if err != nil {
		return v, bus.Terminal(err)
	}
	return v, nil
}

// Len reports the number of rules.
func (p *Policy) Len() int { return len(p.rules) }

// Evaluate finds the first rule matching req. It returns an error only when
// the request itself is unusable (args or metadata that are not JSON
// objects); such a request gets no verdict at all.
func (p *Policy) Evaluate(req wire.ApprovalRequest) (Verdict, error) {
	args, err := rule.DecodeObject(req.Args)
	if err != nil {
		return Verdict{}, fmt.Errorf("evaluate %s: args: %w", req.ToolCallID, err)
	}
	meta, err := rule.DecodeObject(req.Metadata)
	if err != nil {
		return Verdict{}, fmt.Errorf("evaluate %s: metadata: %w", req.ToolCallID, err)
	}
	// The run's caller, as the request carries it; one that is not an
	// object (a bare string) has no keys to test.
	caller, err := rule.DecodeObject(req.Caller)
	if err != nil {
		caller = map[string]any{}
	}
	in := rule.Context{Caller: caller}
	v := Verdict{Action: ActionEscalate, Rule: -1}
	for i, r := range p.rules {
		if r.Tool != "" {
			if ok, _ := path.Match(r.Tool, req.ToolName); !ok {
				continue
			}
		}
		if r.prog != nil {
			b, err := r.prog.EvalIn(req.ToolName, args, meta, in)
			if err != nil {
				v.Skipped = append(v.Skipped, &RuleError{Index: i, Err: err})
				continue
			}
			if !b {
				continue
			}
		}
		v.Action, v.Rule = r.Action, i
		switch r.Action {
		case ActionDeny:
			v.Message = r.Message
		case ActionApprove:
			v.OverrideArgs = r.overrideJSON
		}
		return v, nil
	}
	return v, nil
}
