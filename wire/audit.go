package wire

import (
	"encoding/json"
	"time"
)

// AuditRecord is one entry of the audit stream TOOLGATE_AUDIT, on
// toolgate.audit.<run_id>: a decision and what became of it (applied,
// refused, late), or a result that was refused, with the reason. The
// approver a decision names, and whether it was signed, are kept here for
// as long as the stream keeps records (forever by default), after the
// conversation has moved on.
type AuditRecord struct {
	// Kind is the reply's category: "approval" (a decision) or "call" (a
	// result).
	Kind string `json:"kind" msgpack:"kind"`
	// Verdict is applied, counted (an approval towards its tool's
	// quorum), refused or late.
	Verdict        string          `json:"verdict" msgpack:"verdict"`
	Reason         string          `json:"reason,omitempty" msgpack:"reason,omitempty"`
	ConversationID string          `json:"conversation_id,omitempty" msgpack:"conversation_id,omitempty"`
	RunID          string          `json:"run_id" msgpack:"run_id"`
	ToolCallID     string          `json:"tool_call_id" msgpack:"tool_call_id"`
	ToolName       string          `json:"tool_name,omitempty" msgpack:"tool_name,omitempty"`
	ApproverID     string          `json:"approver_id,omitempty" msgpack:"approver_id,omitempty"`
	Approved       *bool           `json:"approved,omitempty" msgpack:"approved,omitempty"`
	Signed         bool            `json:"signed,omitempty" msgpack:"signed,omitempty"`
	ArgsDigest     string          `json:"args_digest,omitempty" msgpack:"args_digest,omitempty"`
	OverrideArgs   json.RawMessage `json:"override_args,omitempty" msgpack:"override_args,omitempty"`
	Message        string          `json:"message,omitempty" msgpack:"message,omitempty"`
	WorkerID       string          `json:"worker_id,omitempty" msgpack:"worker_id,omitempty"`
	// Grant is the standing decision (Grant) that decided the call, when
	// one did; no reply was then asked for.
	Grant string `json:"grant,omitempty" msgpack:"grant,omitempty"`
	// ReplySeq is the reply's sequence in TOOLGATE_REPLIES.
	ReplySeq uint64    `json:"reply_seq" msgpack:"reply_seq"`
	Time     time.Time `json:"time" msgpack:"time"`
}
