package wire

import (
	"encoding/json"
	"time"
)

// The wire messages. schemas/ holds their JSON Schema, the contract for
// executors and approvers written in other languages. Dynamic values (args,
// metadata, values) stay raw JSON text inside messages in both encodings, so
// that a msgpack round trip cannot change their number types.

// CallRequest asks a tool-worker to execute an external call. Published on
// toolgate.call.<tool_name>.
type CallRequest struct {
	RunID          string          `json:"run_id" msgpack:"run_id"`
	ConversationID string          `json:"conversation_id" msgpack:"conversation_id"`
	ToolCallID     string          `json:"tool_call_id" msgpack:"tool_call_id"`
	ToolName       string          `json:"tool_name" msgpack:"tool_name"`
	Args           json.RawMessage `json:"args" msgpack:"args"`
	Metadata       json.RawMessage `json:"metadata,omitempty" msgpack:"metadata,omitempty"`
	Deadline       time.Time       `json:"deadline" msgpack:"deadline"`
	Attempt        int             `json:"attempt" msgpack:"attempt"`
}

// ApprovalRequest asks approvers for a decision. Published on
// toolgate.approval.<tool_name>. ArgsDigest is DigestArgs(Args); a decision
// must carry it back unchanged.
type ApprovalRequest struct {
	RunID           string          `json:"run_id" msgpack:"run_id"`
	ConversationID  string          `json:"conversation_id" msgpack:"conversation_id"`
	ToolCallID      string          `json:"tool_call_id" msgpack:"tool_call_id"`
	ToolName        string          `json:"tool_name" msgpack:"tool_name"`
	ToolDescription string          `json:"tool_description,omitempty" msgpack:"tool_description,omitempty"`
	Parameters      json.RawMessage `json:"parameters,omitempty" msgpack:"parameters,omitempty"` // the tool's JSON Schema, for editing args
	Args            json.RawMessage `json:"args" msgpack:"args"`
	ArgsDigest      string          `json:"args_digest" msgpack:"args_digest"`
	Metadata        json.RawMessage `json:"metadata,omitempty" msgpack:"metadata,omitempty"` // the reason, from ApprovalRequired or the tool's config
	Deadline        time.Time       `json:"deadline" msgpack:"deadline"`
	Attempt         int             `json:"attempt" msgpack:"attempt"`
	// EscalatedTo, on a request published again because it was not
	// answered in its tool's escalate_after, names the approvers or roles
	// it is handed to.
	EscalatedTo []string `json:"escalated_to,omitempty" msgpack:"escalated_to,omitempty"`
	// Approvers names who may decide the call (the tool's approvers: and,
	// once escalated, its escalate_to:, roles expanded); empty when anyone
	// trusted may. An approver not named leaves the request to them.
	Approvers []string `json:"approvers,omitempty" msgpack:"approvers,omitempty"`
	// MayNotApprove names the approvers whose approval of the call the
	// orchestrator refuses: the run's caller, when the tool forbids
	// self-approval (the default). They may still deny it; an inbox or a
	// bot leaves the request to the others.
	MayNotApprove []string `json:"may_not_approve,omitempty" msgpack:"may_not_approve,omitempty"`
	// ApproversRule is the tool's approvers: when it is a CEL rule over the
	// decider (Approvers is then empty): an approver evaluates it over
	// itself as the orchestrator does; what the request does not carry
	// (decider.key, conversation) is absent, and a rule that reads it
	// leaves the request shown (the orchestrator judges the decision).
	ApproversRule string `json:"approvers_rule,omitempty" msgpack:"approvers_rule,omitempty"`
	// Roles, with ApproversRule, are the agent config's roles (role →
	// approver names), whence the rule's decider.roles.
	Roles map[string][]string `json:"roles,omitempty" msgpack:"roles,omitempty"`
	// Caller is the run's caller (StartRequest.Caller) as the run was
	// given it: a JSON value, an object or a string. A grant for "this
	// caller" names its "id".
	Caller json.RawMessage `json:"caller,omitempty" msgpack:"caller,omitempty"`
}

// Outcome of a CallReply.
type Outcome string

const (
	OutcomeReturn Outcome = "return" // Value (and optional Content, Metadata)
	OutcomeRetry  Outcome = "retry"  // Message: the model should try again
	OutcomeFailed Outcome = "failed" // Message: the call failed
)

// CallReply is a worker's answer to a CallRequest. Published on
// toolgate.reply.<run_id>.call.
type CallReply struct {
	RunID      string          `json:"run_id" msgpack:"run_id"`
	ToolCallID string          `json:"tool_call_id" msgpack:"tool_call_id"`
	Outcome    Outcome         `json:"outcome" msgpack:"outcome"`
	Value      json.RawMessage `json:"value,omitempty" msgpack:"value,omitempty"`
	Content    string          `json:"content,omitempty" msgpack:"content,omitempty"`
	Message    string          `json:"message,omitempty" msgpack:"message,omitempty"`
	Metadata   json.RawMessage `json:"metadata,omitempty" msgpack:"metadata,omitempty"`
	WorkerID   string          `json:"worker_id,omitempty" msgpack:"worker_id,omitempty"`
}

// Decision is an approver's answer to an ApprovalRequest. Published on
// toolgate.reply.<run_id>.approval. Signature is ed25519 over
// Decision.SigningBytes() (the canonical form without the signature).
type Decision struct {
	RunID        string          `json:"run_id" msgpack:"run_id"`
	ToolCallID   string          `json:"tool_call_id" msgpack:"tool_call_id"`
	ArgsDigest   string          `json:"args_digest" msgpack:"args_digest"`
	Approved     bool            `json:"approved" msgpack:"approved"`
	OverrideArgs json.RawMessage `json:"override_args,omitempty" msgpack:"override_args,omitempty"`
	Message      string          `json:"message,omitempty" msgpack:"message,omitempty"`
	// Metadata, on an approval, reaches the approved call's tool: the
	// worker's CallRequest.Metadata, an in-process tool's
	// RunContext.ToolCallMetadata (D23). Signed with the rest.
	Metadata   json.RawMessage `json:"metadata,omitempty" msgpack:"metadata,omitempty"`
	ApproverID string          `json:"approver_id" msgpack:"approver_id"`
	DecidedAt  time.Time       `json:"decided_at" msgpack:"decided_at"`
	Signature  []byte          `json:"signature,omitempty" msgpack:"signature,omitempty"`
}

// Event is one entry of a conversation's event stream. Published on
// toolgate.event.<conversation_id>.
type Event struct {
	ConversationID string          `json:"conversation_id" msgpack:"conversation_id"`
	RunID          string          `json:"run_id,omitempty" msgpack:"run_id,omitempty"`
	Type           string          `json:"type" msgpack:"type"`
	ToolCallID     string          `json:"tool_call_id,omitempty" msgpack:"tool_call_id,omitempty"`
	Data           json.RawMessage `json:"data,omitempty" msgpack:"data,omitempty"`
	Time           time.Time       `json:"time" msgpack:"time"`
}

// EventBatch is several events of one conversation, in the order they
// happened, stored as one message (HeaderEventBatch): the events a busy
// run emits together cost one stored message instead of one each.
type EventBatch struct {
	Events []Event `json:"events" msgpack:"events"`
}

// MaxEventBatch bounds the events of one EventBatch.
const MaxEventBatch = 1024
