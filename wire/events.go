package wire

import (
	"encoding/json"
	"time"
)

// Event types of TOOLGATE_EVENTS (Event.Type). The first group is the
// agent's own: Data is the agent's event in JSON, its "kind" (the type
// again) and the one field below, without the run, conversation and time
// the Event itself carries. The second is the orchestrator's, one for
// every change of a run or of a deferred call's state, each with its typed
// Data below.
const (
	EventTextDelta        = "text_delta"        // Data: {"kind", "delta": text} from a streaming model
	EventModelResponse    = "model_response"    // Data: {"kind", "message": a model response}
	EventToolCall         = "tool_call"         // Data: {"kind", "part": a validated tool-call part}
	EventToolResult       = "tool_result"       // Data: {"kind", "part": the tool-return or retry-prompt part}
	EventDeferredRequests = "deferred_requests" // Data: {"kind", "requests": a step's whole batch}
	EventDeferredResults  = "deferred_results"  // Data: {"kind", "results": what inline handlers resolved}
	EventRunDone          = "run_done"          // Data: {"kind", "result": the run's result}

	EventRunStarted   = "run_started"   // Data: RunStarted
	EventRunPaused    = "run_paused"    // Data: []PendingCall, the calls the run waits for
	EventRunCompleted = "run_completed" // Data: RunCompleted
	EventRunFailed    = "run_failed"    // Data: RunFailed
	EventReplyApplied = "reply_applied" // Data: ReplyApplied; ToolCallID is set
	EventReplyRefused = "reply_refused" // Data: ReplyRefused; ToolCallID is set
	// EventCallDispatched follows the reply_applied of a decision that
	// approved a call of a workers' tool: the call went to the workers
	// under the same run and tool call id, and the run waits for its
	// result (kind call, with the call's deadline).
	EventCallDispatched = "call_dispatched" // Data: PendingCall; ToolCallID is set
	EventCallsExpired   = "calls_expired"   // Data: CallsExpired
	// EventConversationCancelled: the conversation was cancelled; RunID is
	// the run whose calls were pending, or the run under way.
	EventConversationCancelled = "conversation_cancelled" // Data: ConversationCancelled
	// EventAgentUnavailable: the conversation needs a run and no live
	// replica runs its agent; RunID is the run that waits.
	EventAgentUnavailable = "agent_unavailable" // Data: AgentUnavailable
	// EventToolUnserved: a call was published for a tool whose calls no
	// worker is taking (none pulls them, none holds one); it waits for a
	// worker until its deadline. ToolCallID is set.
	EventToolUnserved = "tool_unserved" // Data: ToolUnserved
	// EventApprovalEscalated: an approval call was unanswered for its
	// tool's escalate_after; its request was published again for the
	// escalation group, who may decide it too. ToolCallID is set.
	EventApprovalEscalated = "approval_escalated" // Data: ApprovalEscalated
)

// ApprovalEscalated is the data of an approval_escalated event.
type ApprovalEscalated struct {
	Tool string `json:"tool"`
	// To are the approvers or roles the call was handed to.
	To       []string  `json:"to"`
	Deadline time.Time `json:"deadline"`
}

// RunStarted is the data of a run_started event.
type RunStarted struct {
	// Resume is set on a follow-up run, started when a paused run's
	// deferred calls were all answered.
	Resume bool   `json:"resume"`
	Prompt string `json:"prompt,omitempty"`
	// Agent is the agent the run goes on with, Replica the orchestrator
	// replica (its instance id) that runs it.
	Agent   string `json:"agent,omitempty"`
	Replica string `json:"replica,omitempty"`
}

// AgentUnavailable is the data of an agent_unavailable event: the
// conversation needs a run and no replica runs its agent; it fails at
// FailsAt unless one comes.
type AgentUnavailable struct {
	Agent       string    `json:"agent"`
	AgentDigest string    `json:"agent_digest,omitempty"`
	Reason      string    `json:"reason"`
	FailsAt     time.Time `json:"fails_at"`
}

// ToolUnserved is the data of a tool_unserved event: the call of Tool
// waits in the stream, since no worker takes calls of it; it fails "timed
// out" at Deadline unless a worker comes.
type ToolUnserved struct {
	Tool     string    `json:"tool"`
	Reason   string    `json:"reason"`
	Deadline time.Time `json:"deadline"`
}

// RunCompleted is the data of a run_completed event.
type RunCompleted struct {
	Output string `json:"output"`
}

// RunFailed is the data of a run_failed event.
type RunFailed struct {
	Error string `json:"error"`
}

// PendingCall is a deferred call waiting for its reply: an element of a
// run_paused event's data and of a conversation's pending list in the
// HTTP API.
type PendingCall struct {
	ConversationID string          `json:"conversation_id,omitempty"`
	RunID          string          `json:"run_id,omitempty"`
	ToolCallID     string          `json:"tool_call_id"`
	ToolName       string          `json:"tool_name"`
	Kind           string          `json:"kind"` // ReplyKindCall or ReplyKindApproval
	Args           json.RawMessage `json:"args"`
	Metadata       json.RawMessage `json:"metadata,omitempty"` // the reason of an approval
	Deadline       time.Time       `json:"deadline"`
}

// ReplyApplied is the data of a reply_applied event: who decided and how,
// for a decision; the outcome, for a result. Only Kind is always set.
type ReplyApplied struct {
	Kind       string `json:"kind"` // ReplyKindCall or ReplyKindApproval
	Approved   *bool  `json:"approved,omitempty"`
	ApproverID string `json:"approver_id,omitempty"`
	Message    string `json:"message,omitempty"`
	Outcome    string `json:"outcome,omitempty"`
	WorkerID   string `json:"worker_id,omitempty"`
}

// ReplyRefused is the data of a reply_refused event.
type ReplyRefused struct {
	Kind    string `json:"kind"`
	Verdict string `json:"verdict"` // refused or late
	Reason  string `json:"reason"`
}

// CallsExpired is the data of a calls_expired event: calls settled by
// their deadline.
type CallsExpired struct {
	Calls       int      `json:"calls"`
	ToolCallIDs []string `json:"tool_call_ids"`
}

// ConversationCancelled is the data of a conversation_cancelled event: the
// pending calls the cancel settled (approvals denied, external calls
// failed, with the message Reason).
type ConversationCancelled struct {
	Reason      string   `json:"reason"`
	ToolCallIDs []string `json:"tool_call_ids"`
}

// DecodeEvents decodes a message of TOOLGATE_EVENTS: one event or, when
// the message carries HeaderEventBatch (batched), the events of an
// EventBatch.
func DecodeEvents(data []byte, contentType string, batched bool) ([]Event, error) {
	if !batched {
		var e Event
		if err := Decode(data, contentType, &e); err != nil {
			return nil, err
		}
		return []Event{e}, nil
	}
	var batch EventBatch
	if err := Decode(data, contentType, &batch); err != nil {
		return nil, err
	}
	return batch.Events, nil
}
