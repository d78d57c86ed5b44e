package orchestrator

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/cel-go/cel"
)

// approvalRule decides whether a call of a tool needs a decision first.
type approvalRule struct {
	always  bool
	never   bool
	expr    string
	program cel.Program
}

// celEnv is built once: a cel.Env is safe for concurrent use and costly to
// create.
var celEnv = func() *cel.Env {
	env, err := cel.NewEnv(
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("tool", cel.StringType),
	)
	if err != nil {
		panic(fmt.Sprintf("orchestrator: cel environment: %v", err))
	}
	return env
}()

func compileApproval(s string) (*approvalRule, error) {
	switch strings.TrimSpace(s) {
	case "", ApprovalNever:
		return &approvalRule{never: true}, nil
	case ApprovalAlways:
		return &approvalRule{always: true}, nil
	}
	ast, iss := celEnv.Compile(s)
	if iss != nil && iss.Err() != nil {
		return nil, fmt.Errorf("CEL %q: %w", s, iss.Err())
	}
	if t := ast.OutputType(); t != cel.BoolType && t != cel.DynType {
		return nil, fmt.Errorf("CEL %q: evaluates to %s, want bool", s, t)
	}
	prg, err := celEnv.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, fmt.Errorf("CEL %q: %w", s, err)
	}
	return &approvalRule{expr: s, program: prg}, nil
}

// required reports whether a call with these args needs a decision. It fails
// closed: args that cannot be decoded, an evaluation error (a missing key, a
// wrong type) or a non-bool result all mean approval is required, and the
// error says why.
func (r *approvalRule) required(tool string, args json.RawMessage) (bool, error) {
	switch {
	case r == nil || r.never:
		return false, nil
	case r.always:
		return true, nil
	}
	m := map[string]any{}
	if len(args) > 0 {
		if err := json.Unmarshal(args, &m); err != nil {
			return true, fmt.Errorf("approval rule %q: args: %w", r.expr, err)
		}
	}
	out, _, err := r.program.Eval(map[string]any{"args": m, "tool": tool})
	if err != nil {
		return true, fmt.Errorf("approval rule %q: %w", r.expr, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return true, fmt.Errorf("approval rule %q: result %v is not a bool", r.expr, out.Value())
	}
	return b, nil
}
