// Package rule is the one CEL dialect of toolgate's two gates: the
// orchestrator's `approval:` expression, which decides whether a call needs
// a decision, and the approver policy's `when:`, which decides what the
// decision is. Both see the model's args, so both evaluate them the same
// way and under the same bound:
//
//   - variables: args and metadata (map(string, dyn)) and tool (string);
//     at the orchestrator also caller (map(string, dyn): the run's caller
//     object) and conversation (map(string, dyn): id, agent, runs, tools,
//     calls; see Conversation); at the approver caller is the one the
//     request carries and conversation is empty; in a tool's approvers
//     rule also decider (map(string, dyn): id, roles, key; see Decider);
//   - numbers from JSON are normalised: an integral number is an int, any
//     other a double, so `args.count == 3` and `args.count + 1` work;
//   - numbers of different types compare (`args.size > 1.5` on an int);
//   - the strings extension (`lowerAscii`, `split`, …);
//   - every evaluation is bounded by CostLimit: args are written by a
//     model and may be large, so an expression must not spin on them.
package rule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
)

// CostLimit bounds one evaluation.
const CostLimit = 1_000_000

// Rule is a compiled boolean expression. It is safe for concurrent use.
type Rule struct {
	expr string
	prog cel.Program
}

// env is built once: a cel.Env is safe for concurrent use and costly to
// create.
var env = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("metadata", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("tool", cel.StringType),
		cel.Variable("caller", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("conversation", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("decider", cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true),
		ext.Strings(),
	)
})

// Compile parses and type-checks expr, which must yield a bool.
func Compile(expr string) (*Rule, error) {
	e, err := env()
	if err != nil {
		return nil, fmt.Errorf("cel environment: %w", err)
	}
	ast, iss := e.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	// A dyn result (`args.flag`) is refused too: whether it is a bool
	// would only be known per call.
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("expression yields %s, want bool", ast.OutputType())
	}
	prog, err := e.Program(ast, cel.CostLimit(CostLimit))
	if err != nil {
		return nil, err
	}
	return &Rule{expr: expr, prog: prog}, nil
}

// String is the expression.
func (r *Rule) String() string { return r.expr }

// Eval evaluates the rule over a tool call. args and metadata are JSON
// objects (absent or null is an empty object).
func (r *Rule) Eval(tool string, args, metadata json.RawMessage) (bool, error) {
	a, err := DecodeObject(args)
	if err != nil {
		return false, fmt.Errorf("args: %w", err)
	}
	m, err := DecodeObject(metadata)
	if err != nil {
		return false, fmt.Errorf("metadata: %w", err)
	}
	return r.EvalDecoded(tool, a, m)
}

// EvalDecoded evaluates the rule over args and metadata already decoded by
// DecodeObject (a policy decodes a request once for all its rules).
func (r *Rule) EvalDecoded(tool string, args, metadata map[string]any) (bool, error) {
	return r.EvalIn(tool, args, metadata, Context{})
}

// Context is what a rule at the orchestrator sees of the run besides the
// call: caller is the run's caller object (DecodeObject), conversation
// what Conversation makes. nil ones are empty maps.
type Context struct {
	Caller       map[string]any
	Conversation map[string]any
	// Decider is who decides the call, for a tool's approvers rule
	// (Decider makes it); empty elsewhere.
	Decider map[string]any
}

// Decider is the `decider` variable: id (string), roles (list of
// strings) and key (string: base64 public key, "" when untrusted).
func Decider(id string, roles []string, key string) map[string]any {
	rs := make([]any, len(roles))
	for i, r := range roles {
		rs[i] = r
	}
	return map[string]any{"id": id, "roles": rs, "key": key}
}

// Call is one tool call made so far in a conversation, for Conversation.
type Call struct {
	Tool string
	// Outcome is success, denied or failed (its result), retry (the model
	// was asked to fix its args) or "" (no result yet).
	Outcome string
}

// Conversation is the `conversation` variable: id, agent, runs (how many
// runs, this one included), tools (the names of the tools called so far,
// in order, repeats kept) and calls (a list of {tool, outcome}).
func Conversation(id, agent string, runs int, calls []Call) map[string]any {
	tools := make([]any, len(calls))
	cs := make([]any, len(calls))
	for i, c := range calls {
		tools[i] = c.Tool
		cs[i] = map[string]any{"tool": c.Tool, "outcome": c.Outcome}
	}
	return map[string]any{"id": id, "agent": agent, "runs": int64(runs), "tools": tools, "calls": cs}
}

// EvalIn evaluates the rule over a tool call in c.
func (r *Rule) EvalIn(tool string, args, metadata map[string]any, c Context) (bool, error) {
	if c.Caller == nil {
		c.Caller = map[string]any{}
	}
	if c.Conversation == nil {
		c.Conversation = map[string]any{}
	}
	if c.Decider == nil {
		c.Decider = map[string]any{}
	}
	out, _, err := r.prog.Eval(map[string]any{"args": args, "metadata": metadata, "tool": tool,
		"caller": c.Caller, "conversation": c.Conversation, "decider": c.Decider})
	if err != nil {
		return false, err
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("yielded %T, want bool", out.Value())
	}
	return b, nil
}

// DecodeObject turns a JSON object into a map for CEL. Integral numbers
// become int64 so that `args.count == 3` and `args.count + 1` behave as a
// rule's author expects; other numbers stay float64 (a number beyond
// float64 stays its text). Absent or null is an empty map so that
// `has(metadata.x)` works on requests without metadata.
func DecodeObject(raw json.RawMessage) (map[string]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after JSON value")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a JSON object, got %s", jsonKind(v))
	}
	return normalizeNumbers(m).(map[string]any), nil
}

func normalizeNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = normalizeNumbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = normalizeNumbers(e)
		}
		return x
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, err := x.Float64()
		if err != nil || math.IsInf(f, 0) {
			return x.String()
		}
		return f
	default:
		return v
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	default:
		return fmt.Sprintf("%T", v)
	}
}
