package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// Tool is a function the model may call, described to it by a ToolDef. Build
// one with NewTool (typed args), NewRawTool (args as raw JSON) or
// ExternalToolset (schema only). The zero Tool is not usable.
//
// How the loop handles a call of a tool (D1–D5, D23):
//  1. the args are validated against the tool's JSON Schema; invalid args
//     become a retry prompt charged to the tool's retry budget;
//  2. a call that is not yet approved and needs an approval (the tool
//     requires it, or its approval predicate says so) is deferred as an
//     approval call;
//  3. a call of an external tool, approved or not gated, is deferred as an
//     external call;
//  4. the args validator (WithValidator) runs; it may defer the call or ask
//     for a retry;
//  5. the body runs.
//
// Steps 1–4 run for the calls of one phase one after another in the model's
// emission order, before any body of that phase starts; the bodies of a phase
// then run concurrently.
type Tool struct {
	def              ToolDef
	schema           *argsSchema
	requiresApproval bool
	approvalFunc     ApprovalFunc
	external         bool
	noEffects        bool
	maxRetries       int
	decode           func(args json.RawMessage) (any, error)
	validate         func(ctx *RunContext, args any) error
	call             func(ctx *RunContext, args any) (any, error)
}

// Def is how the tool is described to the model.
func (t Tool) Def() ToolDef { return t.def }

// Name is the tool's name.
func (t Tool) Name() string { return t.def.Name }

// RequiresApproval reports whether every call of the tool waits for an
// approval before it runs (D1).
func (t Tool) RequiresApproval() bool { return t.requiresApproval }

// External reports whether the tool's calls are always executed outside the
// run (D3).
func (t Tool) External() bool { return t.external }

// MaxRetries is the tool's retry budget per run (D27).
func (t Tool) MaxRetries() int { return t.maxRetries }

// ApprovalFunc decides, per call, whether a call needs an approval before it
// runs (D4). args are the call's args, already validated against the schema.
type ApprovalFunc func(ctx *RunContext, tool ToolDef, args json.RawMessage) (bool, error)

// ToolOption configures a tool at construction.
type ToolOption func(*toolOptions) error

type toolOptions struct {
	requiresApproval bool
	noEffects        bool
	retries          int
	schema           json.RawMessage
	validator        any
}

// RequiresApproval declares that every call of the tool needs an approval;
// the body then runs only for approved calls, with RunContext.ToolCallApproved
// set (D1).
func RequiresApproval() ToolOption {
	return func(o *toolOptions) error { o.requiresApproval = true; return nil }
}

// WithoutEffects declares that the tool's body has no effect outside the
// run: it only decides what becomes of a call (defers it, asks for an
// approval, answers from its args) and touches nothing else, so that
// RunInput.BeforeEffects need not be called before it runs.
func WithoutEffects() ToolOption {
	return func(o *toolOptions) error { o.noEffects = true; return nil }
}

// WithRetries sets the tool's retry budget per run (D27): how many retry
// prompts (invalid args, ModelRetry from the validator or body) a run may
// send for this tool before it fails. Defaults to 1.
func WithRetries(n int) ToolOption {
	return func(o *toolOptions) error {
		if n < 0 {
			return fmt.Errorf("retries %d is negative", n)
		}
		o.retries = n
		return nil
	}
}

// WithSchema gives the JSON Schema of the args object explicitly instead of
// deriving it from the Args type.
func WithSchema(schema json.RawMessage) ToolOption {
	return func(o *toolOptions) error {
		if !json.Valid(schema) {
			return errors.New("schema is not valid JSON")
		}
		o.schema = schema
		return nil
	}
}

// WithValidator adds an args validator that runs after schema validation and
// before the body (D2). It may return deferred.ApprovalRequired or
// deferred.CallDeferred to defer the call, ModelRetry to send a retry prompt,
// or ToolFailed. Args must be the tool's args type (json.RawMessage for
// NewRawTool); a mismatch is reported by the tool's constructor.
func WithValidator[Args any](fn func(ctx *RunContext, args Args) error) ToolOption {
	return func(o *toolOptions) error {
		if fn == nil {
			return errors.New("validator is nil")
		}
		o.validator = fn
		return nil
	}
}

func applyToolOptions(opts []ToolOption) (toolOptions, error) {
	o := toolOptions{retries: 1}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// NewTool builds a tool whose args are decoded into Args after they passed
// validation against Args' JSON Schema (derived with invopop/jsonschema unless
// WithSchema gives one). fn may return:
//   - a value, marshalled to JSON as the tool's result;
//   - a ToolReturn, for a result with metadata and extra content for the model;
//   - ModelRetry(msg) to ask the model to try again (charged to the budget);
//   - ToolFailed(msg) to report a failed call to the model;
//   - deferred.ApprovalRequired / deferred.CallDeferred to defer the call;
//   - any other error, which fails the run.
func NewTool[Args, Out any](name, description string, fn func(ctx *RunContext, args Args) (Out, error), opts ...ToolOption) (Tool, error) {
	if fn == nil {
		return Tool{}, fmt.Errorf("tool %s: function is nil", name)
	}
	o, err := applyToolOptions(opts)
	if err != nil {
		return Tool{}, fmt.Errorf("tool %s: %w", name, err)
	}
	schema := o.schema
	if schema == nil {
		schema, err = reflectSchema(reflect.TypeFor[Args]())
		if err != nil {
			return Tool{}, fmt.Errorf("tool %s: %w", name, err)
		}
	}
	var validate func(ctx *RunContext, args any) error
	if o.validator != nil {
		v, ok := o.validator.(func(*RunContext, Args) error)
		if !ok {
			return Tool{}, fmt.Errorf("tool %s: validator takes %T, want func(*agent.RunContext, %s) error", name, o.validator, reflect.TypeFor[Args]())
		}
		validate = func(ctx *RunContext, args any) error { return v(ctx, args.(Args)) }
	}
	decode := func(raw json.RawMessage) (any, error) {
		var a Args
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, err
		}
		return a, nil
	}
	if reflect.TypeFor[Args]() == reflect.TypeFor[json.RawMessage]() {
		decode = func(raw json.RawMessage) (any, error) { return raw, nil }
	}
	call := func(ctx *RunContext, args any) (any, error) {
		out, err := fn(ctx, args.(Args))
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	return newTool(ToolDef{Name: name, Description: description, Parameters: schema}, o, decode, validate, call)
}

// RawToolFunc is the body of a tool that takes its args as raw JSON.
type RawToolFunc func(ctx *RunContext, args json.RawMessage) (any, error)

// NewRawTool builds a tool from a definition with an explicit JSON Schema and
// a body that receives the validated args as raw JSON; tools built from
// configuration use it. The body's results are read as for NewTool. A
// validator given with WithValidator must take json.RawMessage.
func NewRawTool(def ToolDef, fn RawToolFunc, opts ...ToolOption) (Tool, error) {
	if fn == nil {
		return Tool{}, fmt.Errorf("tool %s: function is nil", def.Name)
	}
	o, err := applyToolOptions(opts)
	if err != nil {
		return Tool{}, fmt.Errorf("tool %s: %w", def.Name, err)
	}
	if o.schema != nil {
		def.Parameters = o.schema
	}
	var validate func(ctx *RunContext, args any) error
	if o.validator != nil {
		v, ok := o.validator.(func(*RunContext, json.RawMessage) error)
		if !ok {
			return Tool{}, fmt.Errorf("tool %s: validator takes %T, want func(*agent.RunContext, json.RawMessage) error", def.Name, o.validator)
		}
		validate = func(ctx *RunContext, args any) error { return v(ctx, args.(json.RawMessage)) }
	}
	decode := func(raw json.RawMessage) (any, error) { return raw, nil }
	call := func(ctx *RunContext, args any) (any, error) { return fn(ctx, args.(json.RawMessage)) }
	return newTool(def, o, decode, validate, call)
}

func newTool(def ToolDef, o toolOptions, decode func(json.RawMessage) (any, error), validate func(*RunContext, any) error, call func(*RunContext, any) (any, error)) (Tool, error) {
	if def.Name == "" {
		return Tool{}, errors.New("tool name is empty")
	}
	s, err := compileSchema(def.Name, def.Parameters)
	if err != nil {
		return Tool{}, err
	}
	return Tool{
		def:              def,
		schema:           s,
		requiresApproval: o.requiresApproval,
		noEffects:        o.noEffects,
		maxRetries:       o.retries,
		decode:           decode,
		validate:         validate,
		call:             call,
	}, nil
}

// ToolReturn is a tool result with more than a value (D25): Value goes to the
// model as the tool's result, Content (when not empty) as a user part after
// all tool parts of the step, Metadata stays on the tool-return part for the
// application and is not shown to the model.
type ToolReturn struct {
	Value    any    `json:"value"`
	Content  string `json:"content,omitempty"`
	Metadata any    `json:"metadata,omitempty"`
}

// ModelRetryError asks the model to try the call again; see ModelRetry.
type ModelRetryError struct{ Message string }

func (e *ModelRetryError) Error() string { return "model retry: " + e.Message }

// ModelRetry is returned by a tool body or validator to send msg to the model
// as a retry prompt. It is charged to the tool's retry budget (D27).
func ModelRetry(msg string) error { return &ModelRetryError{Message: msg} }

// ToolFailedError reports a failed call; see ToolFailed.
type ToolFailedError struct{ Message string }

func (e *ToolFailedError) Error() string { return "tool failed: " + e.Message }

// ToolFailed is returned by a tool body to tell the model the call failed: the
// model sees msg in a tool return with outcome "failed". It uses no retry
// budget.
func ToolFailed(msg string) error { return &ToolFailedError{Message: msg} }
