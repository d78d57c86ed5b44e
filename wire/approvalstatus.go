package wire

// An approver must show and decide only pending requests, and a request
// stays in TOOLGATE_APPROVALS long after it was settled; events that tell
// of its settling go with a deleted conversation. So approvers ask the
// orchestrator, which answers from the conversations' state (gone for a
// deleted one: then it is not pending either), and the orchestrator tells
// the outcome of each decision it handles (docs/protocol.md, "Is it still
// pending?" and "The outcome of a decision").
const (
	// SubjectApprovalStatus takes an ApprovalStatusRequest (core NATS
	// request-reply, JSON) and answers an ApprovalStatusReply. Every
	// orchestrator replica serves it in the queue group
	// ApprovalStatusQueue.
	SubjectApprovalStatus = "toolgate.status.approvals"
	ApprovalStatusQueue   = "toolgate_orchestrator"
	// PrefixOutcome.<run>: a DecisionOutcome, core NATS, JSON, published
	// once per delivery of a decision to the run that the orchestrator
	// handled (not stored: an approver subscribes before it publishes).
	PrefixOutcome = "toolgate.outcome"
	// AllOutcomes is the filter for every decision's outcome.
	AllOutcomes = PrefixOutcome + ".*"
)

// MaxStatusCalls bounds the calls of one ApprovalStatusRequest.
const MaxStatusCalls = 1000

// OutcomeSubject is toolgate.outcome.<run>.
func OutcomeSubject(runID string) (string, error) { return subject("run id", PrefixOutcome, runID) }

// CallRef names one deferred call.
type CallRef struct {
	RunID      string `json:"run_id"`
	ToolCallID string `json:"tool_call_id"`
}

// ApprovalStatusRequest asks whether approval requests are still pending.
type ApprovalStatusRequest struct {
	Calls []CallRef `json:"calls"`
}

// Approval states, ApprovalStatus.State.
const (
	StatePending   = "pending"   // waiting for a decision
	StateDecided   = "decided"   // a decision was applied (By says whose)
	StateExpired   = "expired"   // its deadline settled it
	StateCancelled = "cancelled" // its conversation was cancelled
	StateOver      = "over"      // its run no longer waits (ended, failed, or its batch was taken)
	StateUnknown   = "unknown"   // no conversation has the run: deleted, or never made
)

// ApprovalStatus is the state of one call; only StatePending may be
// shown or decided.
type ApprovalStatus struct {
	RunID      string `json:"run_id"`
	ToolCallID string `json:"tool_call_id"`
	State      string `json:"state"`
	// By is the approver whose decision was applied (StateDecided).
	By string `json:"by,omitempty"`
}

// Pending reports whether the call may still be decided.
func (s ApprovalStatus) Pending() bool { return s.State == StatePending }

// ApprovalStatusReply answers an ApprovalStatusRequest, one status per
// call in the request's order; Error, when set, says why none could be
// given (the asker then knows nothing more than before).
type ApprovalStatusReply struct {
	Calls []ApprovalStatus `json:"calls"`
	Error string           `json:"error,omitempty"`
}

// Verdicts of DecisionOutcome: what the orchestrator did with a decision.
const (
	VerdictApplied    = "applied"     // it settled the call
	VerdictDuplicate  = "duplicate"   // the call had its answer already
	VerdictRefused    = "refused"     // wrong digest, untrusted signer, unknown call, …
	VerdictLate       = "late"        // the call was settled (expired, cancelled, run over)
	VerdictUnknownRun = "unknown_run" // no conversation has the run (deleted)
)

// DecisionOutcome is what the orchestrator did with one decision, told on
// OutcomeSubject. DecisionID is the decision's Nats-Msg-Id, so an approver
// tells its decision's outcome from another's on the same call.
type DecisionOutcome struct {
	RunID      string `json:"run_id"`
	ToolCallID string `json:"tool_call_id"`
	ApproverID string `json:"approver_id"`
	DecisionID string `json:"decision_id"`
	Verdict    string `json:"verdict"`
	Reason     string `json:"reason,omitempty"`
}

// Applied reports whether the decision settled its call.
func (o DecisionOutcome) Applied() bool { return o.Verdict == VerdictApplied }
