package deferred

import "encoding/json"

// Call is a tool call exactly as the model emitted it.
type Call struct {
	ToolName   string          `json:"tool_name" msgpack:"tool_name"`
	Args       json.RawMessage `json:"args" msgpack:"args"` // a JSON object; "{}" when the model sent none
	ToolCallID string          `json:"tool_call_id" msgpack:"tool_call_id"`
}

// Requests is the batch a paused run ends with: calls whose result comes from
// outside (Calls) and calls waiting for a decision (Approvals), each in model
// emission order (D7), with the metadata of dynamic deferrals keyed by
// tool_call_id (D8).
type Requests struct {
	Calls     []Call                     `json:"calls" msgpack:"calls"`
	Approvals []Call                     `json:"approvals" msgpack:"approvals"`
	Metadata  map[string]json.RawMessage `json:"metadata" msgpack:"metadata"`
}

// Results answers a Requests batch: a Decision per approval call and a Result
// per external call, keyed by tool_call_id, plus metadata handed to an approved
// call as RunContext.ToolCallMetadata (D23).
type Results struct {
	Approvals map[string]Decision        `json:"approvals" msgpack:"approvals"`
	Calls     map[string]Result          `json:"calls" msgpack:"calls"`
	Metadata  map[string]json.RawMessage `json:"metadata" msgpack:"metadata"`
}

// Decision answers an approval call: Approved or Denied (D20, D22).
type Decision interface{ isDecision() }

// Approved lets the call run; OverrideArgs, when set, replaces the model's args
// entirely for validation and execution (D24).
type Approved struct {
	OverrideArgs json.RawMessage `json:"override_args,omitempty" msgpack:"override_args,omitempty"`
}

// Denied refuses the call; Message is what the model is told. An empty
// Message means DefaultDenyMessage.
type Denied struct {
	Message string `json:"message" msgpack:"message"`
}

// DefaultDenyMessage is what a plain `false` decision tells the model (D22).
const DefaultDenyMessage = "The tool call was denied."

func (Approved) isDecision() {}
func (Denied) isDecision()   {}

// Result answers an external call (D25): Value, Return, Retry or Failed.
type Result interface{ isResult() }

// Value is a plain result value (any JSON).
type Value struct {
	Value json.RawMessage `json:"value" msgpack:"value"`
}

// Return is a result with extra parts: Content goes to the model as a user
// part after all tool parts, Metadata is kept on the tool-return part.
type Return struct {
	Value    json.RawMessage `json:"value" msgpack:"value"`
	Content  string          `json:"content,omitempty" msgpack:"content,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty" msgpack:"metadata,omitempty"`
}

// Retry asks the model to try again with Message (ModelRetry).
type Retry struct {
	Message string `json:"message" msgpack:"message"`
}

// Failed reports that the call failed (ToolFailed); the model sees Message
// with outcome "failed".
type Failed struct {
	Message string `json:"message" msgpack:"message"`
}

func (Value) isResult()  {}
func (Return) isResult() {}
func (Retry) isResult()  {}
func (Failed) isResult() {}
