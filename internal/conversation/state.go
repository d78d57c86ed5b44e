package conversation

import (
	"bytes"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/wire"
)

// Status is where a conversation stands.
type Status string

const (
	// StatusRunning: a run is executing under a lease.
	StatusRunning Status = "running"
	// StatusPaused: the last run ended with a batch; replies are awaited.
	StatusPaused Status = "paused"
	// StatusResuming: the batch is complete and claimed; its follow-up run
	// (Batch.FollowUpRunID) is executing under a lease, or is to be
	// relaunched once the lease expires.
	StatusResuming  Status = "resuming"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	// StatusQueued is a run's, never a conversation's: a prompt given
	// while its conversation was paused, which the follow-up run sends
	// once the batch is answered; the run has not started.
	StatusQueued Status = "queued"
	// StatusCancelled: the conversation was cancelled; its pending calls
	// were settled as cancelled and later replies are refused as late.
	StatusCancelled Status = "cancelled"
	// StatusDeleted: the conversation is being deleted. Its log holds
	// only the record that set this status (the tombstone): every replica
	// that catches up, however stale its cache, reads it and answers that
	// the conversation is not found, and a change racing the delete fails
	// its append and sees it.
	StatusDeleted Status = "deleted"
)

// Ended reports whether nothing can happen to the conversation but a new
// run (finished) or nothing at all (deleted).
func (s Status) Ended() bool { return s.Terminal() || s == StatusDeleted }

// Terminal reports whether no run is under way or awaited.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// State is the whole stored state of one conversation: the fold of
// its log (subject toolgate.conv.<id> of stream TOOLGATE_CONVERSATIONS). It is all a replica needs to continue
// the conversation; nothing about it is kept in memory between events.
type State struct {
	ID      string          `msgpack:"id"`
	Status  Status          `msgpack:"status"`
	History []agent.Message `msgpack:"history"`
	Runs    []*RunRecord    `msgpack:"runs"`
	// Batch is what the current (or last) paused run waits for; nil when no
	// deferred call is outstanding.
	Batch  *Batch `msgpack:"batch,omitempty"`
	Output string `msgpack:"output,omitempty"`
	Error  string `msgpack:"error,omitempty"`
	// Lease is held by the replica executing a run; it is renewed while the
	// run lasts, and a run whose lease expired may be relaunched elsewhere.
	Lease *Lease `msgpack:"lease,omitempty"`
	// StaleReplies counts replies to runs that no longer wait: repeats of
	// answers a follow-up has already taken, and the ones refused there (a
	// decision from a signer not trusted, a reply for a call never made).
	StaleReplies int `msgpack:"stale_replies,omitempty"`
	// Decisions records every applied decision with who made it; the
	// batch that held them is dropped once its follow-up has run, this
	// stays with the conversation.
	Decisions []DecisionRecord `msgpack:"decisions,omitempty"`
	// Agent names the agent the conversation runs with; AgentDigest is
	// the digest of that agent's config (AgentDigest) its runs go on with.
	// Only a replica that runs that agent with that digest runs them (or
	// one that adopts it under the upgrade rule, rewriting the digest).
	Agent       string `msgpack:"agent,omitempty"`
	AgentDigest string `msgpack:"agent_digest,omitempty"`
	// Caller is StartRequest.Caller of the latest prompt: who the
	// application said gave it. Its runs, follow-ups included, see it as
	// RunContext.Caller.
	Caller json.RawMessage `msgpack:"caller,omitempty"`
	// FrontendTools are the tools its frontend declared
	// (StartRequest.FrontendTools), offered in its runs.
	FrontendTools []agent.ToolDef `msgpack:"frontend_tools,omitempty"`
	// Signed says a config of its agent that ran it takes only signed
	// decisions (AgentConfig.Trust): from then on, only a replica whose
	// config does too may judge its decisions, whatever config adopts it.
	Signed bool `msgpack:"signed,omitempty"`
	// Unserved says why no replica runs the conversation's next run (none
	// runs its agent), since UnservedSince; it fails after
	// Config.AgentWait. Cleared when a replica takes the run.
	Unserved      string    `msgpack:"unserved,omitempty"`
	UnservedSince time.Time `msgpack:"unserved_since,omitempty"`
	CreatedAt     time.Time `msgpack:"created_at"`
	UpdatedAt     time.Time `msgpack:"updated_at"`

	// runsOwned says whether Runs' array is c's alone (ownRuns): a clone
	// shares it, and neither changes it in place. Not stored.
	runsOwned bool
	// historyRoom is set when History's array has room past its length
	// that a run may append to (agent.RunInput.HistoryRoom): the first run
	// that takes the flag does, any other copies the history. Clones share
	// it with the array. Not stored.
	historyRoom *atomic.Bool
}

// DecisionRecord is an applied decision: which call, what, and who.
type DecisionRecord struct {
	RunID      string `msgpack:"run_id" json:"run_id"`
	ToolCallID string `msgpack:"tool_call_id" json:"tool_call_id"`
	ToolName   string `msgpack:"tool_name" json:"tool_name"`
	Approved   bool   `msgpack:"approved" json:"approved"`
	Message    string `msgpack:"message,omitempty" json:"message,omitempty"`
	// OverrideArgs are the args the call was approved with, in place of
	// the model's (D24).
	OverrideArgs json.RawMessage `msgpack:"override_args,omitempty" json:"override_args,omitempty"`
	ApproverID   string          `msgpack:"approver_id" json:"approver_id"`
	Expired      bool            `msgpack:"expired,omitempty" json:"expired,omitempty"`
	// GrantID is the standing decision that decided the call before
	// anyone was asked (grants.go); ApproverID is then "grant:<id>".
	GrantID string    `msgpack:"grant_id,omitempty" json:"grant_id,omitempty"`
	At      time.Time `msgpack:"at" json:"at"`
}

// RunRecord is one run of a conversation.
type RunRecord struct {
	RunID  string `msgpack:"run_id"`
	Status Status `msgpack:"status"`
	// Prompt is the user prompt the run started with (empty for a
	// follow-up without one); kept so that a run can be relaunched.
	Prompt    string    `msgpack:"prompt,omitempty"`
	StartedAt time.Time `msgpack:"started_at"`
	EndedAt   time.Time `msgpack:"ended_at,omitempty"`
	Error     string    `msgpack:"error,omitempty"`
}

// Lease marks a run as owned by one replica until Until.
type Lease struct {
	Owner string    `msgpack:"owner"`
	RunID string    `msgpack:"run_id"`
	Until time.Time `msgpack:"until"`
}

// Batch is the set of deferred calls a run waits for.
type Batch struct {
	// RunID is the run that issued the calls; replies are addressed to it.
	RunID string `msgpack:"run_id"`
	// Calls are the batch's calls: approvals first, then external calls,
	// each in emission order, one per entry of the Requests the agent
	// produced, which they also keep exactly (see requests), so that the
	// arguments are stored once rather than twice in a value rewritten at
	// every reply.
	Calls []*PendingCall `msgpack:"calls"`
	// ExtraMetadata is the Requests' metadata for ids none of its calls
	// has.
	ExtraMetadata map[string]json.RawMessage `msgpack:"extra_metadata,omitempty"`
	// FollowUpRunID is chosen when the complete batch is claimed, so that a
	// relaunch after a crash reuses it and its publishes dedupe.
	FollowUpRunID string `msgpack:"follow_up_run_id,omitempty"`
	// Prompt is a user prompt given while the batch was pending: the
	// follow-up run sends it after the batch's results.
	Prompt string `msgpack:"prompt,omitempty"`
	// PromptRunID is the id of the follow-up run Prompt was given for; the
	// claim uses it, so that a retried request finds its run.
	PromptRunID string `msgpack:"prompt_run_id,omitempty"`
	// Inline is true while the issuing run still waits for replies in
	// process (inline_wait).
	Inline bool `msgpack:"inline,omitempty"`
	// UnknownReplies counts replies to this run for calls it never issued.
	UnknownReplies int `msgpack:"unknown_replies,omitempty"`
	// Trace is the trace context of the run that issued the calls
	// (telemetry.InjectMap): its calls are published with it, and the
	// follow-up links to it, so that one trace spans the pause.
	Trace map[string]string `msgpack:"trace,omitempty"`
}

// PendingCall is one deferred call with what has happened to it.
type PendingCall struct {
	ToolCallID string          `msgpack:"tool_call_id"`
	ToolName   string          `msgpack:"tool_name"`
	Kind       deferred.Kind   `msgpack:"kind"`
	Args       json.RawMessage `msgpack:"args"`
	ArgsDigest string          `msgpack:"args_digest,omitempty"`
	Metadata   json.RawMessage `msgpack:"metadata,omitempty"`
	Deadline   time.Time       `msgpack:"deadline"`
	// SchemaDigest is, for a call of a discovered tool, the SchemaDigest of
	// the args schema the call was made against; an approved call whose
	// tool has another one when its follow-up runs is not run (it reads
	// ToolChangedMessage).
	SchemaDigest string `msgpack:"schema_digest,omitempty"`
	// ReqArgs are the args as the agent's Requests had them, when they are
	// not byte for byte Args (none were sent, or a call taken over from the
	// run's inline wait with args written differently).
	ReqArgs json.RawMessage `msgpack:"req_args,omitempty"`
	// ReqMetadata is the Requests' metadata for the call when it is not
	// Metadata; NoReqMetadata says the Requests had none (Metadata then
	// comes from the tool's config).
	ReqMetadata   json.RawMessage `msgpack:"req_metadata,omitempty"`
	NoReqMetadata bool            `msgpack:"no_req_metadata,omitempty"`
	// Executor is ExecutorFrontend for a call a frontend answers (marked
	// Published, as nothing publishes it); empty for a worker's.
	Executor  string `msgpack:"executor,omitempty"`
	Published bool   `msgpack:"published,omitempty"`
	// PublishedAt is when the call was (first) published, for the time to
	// a decision or a result.
	PublishedAt time.Time `msgpack:"published_at,omitempty"`
	// Dispatch is set on an approval call of a tool its workers execute
	// (a configured or discovered tool, not an in-process one): once
	// approved as it was made, the call goes to the workers at once
	// (State.Dispatch) and has this long to be answered, rather than
	// waiting for a follow-up run that would only defer it again (D26).
	Dispatch time.Duration `msgpack:"dispatch,omitempty"`
	// Approval is the decision that approved a dispatched call, which is
	// then an external call (Kind) waiting for its worker's result (Reply).
	Approval *Reply `msgpack:"approval,omitempty"`
	// Reply is the applied answer; nil while pending.
	Reply *Reply `msgpack:"reply,omitempty"`
	// Taken is set once a run consumed the reply (inline), so it is not
	// offered again.
	Taken bool `msgpack:"taken,omitempty"`
	// Counters of refused replies, for the record.
	Duplicates int `msgpack:"duplicates,omitempty"`
	Late       int `msgpack:"late,omitempty"`
	Refused    int `msgpack:"refused,omitempty"`
	// LastRefusal says why the last reply was refused.
	LastRefusal string `msgpack:"last_refusal,omitempty"`
	// Approvals are the approvers who approved the call so far, while
	// its tool needs more of them (ToolConfig.Approvals).
	Approvals []string `msgpack:"approvals,omitempty"`
	// Escalation is set on an approval call of a tool with
	// EscalateAfter: a pointer, as most calls have none and every paused
	// conversation's calls are kept.
	Escalation *Escalation `msgpack:"escalation,omitempty"`
}

// Unmarked reports whether pc is neither marked published nor answered
// (an answered call was published).
func (pc *PendingCall) Unmarked() bool { return !pc.Published && pc.Reply == nil }

// Escalation is when an approval call still unanswered is handed to its
// tool's EscalateTo (ToolConfig.EscalateAfter), and whether it was.
type Escalation struct {
	At   time.Time `msgpack:"at"`
	Done bool      `msgpack:"done,omitempty"`
}

// Escalated reports whether c was handed to its tool's EscalateTo.
func (c *PendingCall) Escalated() bool { return c.Escalation != nil && c.Escalation.Done }

// Decision is the applied decision of an approval call: its Reply, or its
// Approval once the call went to its workers; nil while none was applied.
func (pc *PendingCall) Decision() *Reply {
	if pc.Approval != nil {
		return pc.Approval
	}
	if pc.Kind == deferred.KindApproval {
		return pc.Reply
	}
	return nil
}

// Settled reports whether the call has its answer.
func (c *PendingCall) Settled() bool { return c.Reply != nil }

// Outcome is how a Reply answered its call: a decision's (approved,
// denied) or a result's, whose outcomes are the wire's (wire.Outcome).
type Outcome string

const (
	OutcomeApproved Outcome = "approved"
	OutcomeDenied   Outcome = "denied"
	OutcomeReturn           = Outcome(wire.OutcomeReturn)
	OutcomeRetry            = Outcome(wire.OutcomeRetry)
	OutcomeFailed           = Outcome(wire.OutcomeFailed)
)

// Reply is an applied answer to a deferred call: a decision (approved,
// denied) or a result (return, retry, failed).
type Reply struct {
	Outcome Outcome `msgpack:"outcome"`
	// Approved: OverrideArgs. Denied, retry, failed: Message.
	OverrideArgs json.RawMessage `msgpack:"override_args,omitempty"`
	Message      string          `msgpack:"message,omitempty"`
	// Return: Value, Content, Metadata. Denied may carry Metadata too
	// (reason "expired").
	Value    json.RawMessage `msgpack:"value,omitempty"`
	Content  string          `msgpack:"content,omitempty"`
	Metadata json.RawMessage `msgpack:"metadata,omitempty"`
	// By is the approver or worker id; "orchestrator" for an expiry.
	By      string    `msgpack:"by,omitempty"`
	At      time.Time `msgpack:"at"`
	Expired bool      `msgpack:"expired,omitempty"`
	// Cancelled marks a call settled by the conversation's cancel.
	Cancelled bool `msgpack:"cancelled,omitempty"`
	// Trace is the trace context of the span that consumed the reply; the
	// follow-up run the reply completes continues it.
	Trace map[string]string `msgpack:"trace,omitempty"`
}

// Complete reports whether every call of the batch has a reply.
func (b *Batch) Complete() bool {
	if b == nil {
		return false
	}
	for _, c := range b.Calls {
		if c.Reply == nil {
			return false
		}
	}
	return true
}

// awaitsApproval reports whether a call of the batch waits for an
// approval decision, that is for a person.
func (b *Batch) awaitsApproval() bool {
	if b == nil {
		return false
	}
	for _, c := range b.Calls {
		if c.Reply == nil && c.Kind == deferred.KindApproval {
			return true
		}
	}
	return false
}

// Call finds a call by id.
func (b *Batch) Call(id string) *PendingCall {
	if b == nil {
		return nil
	}
	for _, c := range b.Calls {
		if c.ToolCallID == id {
			return c
		}
	}
	return nil
}

// NextDeadline is the earliest deadline of a call still pending, or zero.
func (b *Batch) NextDeadline() time.Time {
	var t time.Time
	if b == nil {
		return t
	}
	for _, c := range b.Calls {
		if c.Reply == nil && (t.IsZero() || c.Deadline.Before(t)) {
			t = c.Deadline
		}
		if at := c.escalation(); !at.IsZero() && (t.IsZero() || at.Before(t)) {
			t = at
		}
	}
	return t
}

// escalation is when c is to be escalated; zero when it is not (any more).
func (c *PendingCall) escalation() time.Time {
	if c.Reply != nil || c.Escalation == nil || c.Escalation.Done || c.Kind != deferred.KindApproval {
		return time.Time{}
	}
	return c.Escalation.At
}

// Requests is the batch as the paused run produced it, which the follow-up
// resumes with (D12): an entry approved with override args and deferred
// again carries them (D24, D26).
func (b *Batch) Requests() deferred.Requests {
	var req deferred.Requests
	for _, pc := range b.Calls {
		call := deferred.Call{ToolName: pc.ToolName, ToolCallID: pc.ToolCallID, Args: pc.Args}
		switch {
		case pc.Dispatched():
			// Sent to its workers once approved: an external call with
			// the args they ran, as one deferred again would be (D26).
			call.Args = pc.RunArgs()
		case pc.ReqArgs != nil:
			call.Args = pc.ReqArgs
		}
		if pc.Kind == deferred.KindApproval {
			req.Approvals = append(req.Approvals, call)
		} else {
			req.Calls = append(req.Calls, call)
		}
		meta := pc.Metadata
		switch {
		case pc.NoReqMetadata:
			meta = nil
		case pc.ReqMetadata != nil:
			meta = pc.ReqMetadata
		}
		if meta != nil {
			if req.Metadata == nil {
				req.Metadata = map[string]json.RawMessage{}
			}
			req.Metadata[pc.ToolCallID] = meta
		}
	}
	for id, m := range b.ExtraMetadata {
		if req.Metadata == nil {
			req.Metadata = map[string]json.RawMessage{}
		}
		req.Metadata[id] = m
	}
	return req
}

// KeepRequest records in pc what the Requests had for it where pc differs,
// so that requests gives them back exactly.
func (pc *PendingCall) KeepRequest(call deferred.Call, meta json.RawMessage) {
	pc.ReqArgs, pc.ReqMetadata, pc.NoReqMetadata = nil, nil, false
	if len(call.Args) > 0 && !bytes.Equal(call.Args, pc.Args) {
		pc.ReqArgs = call.Args
	}
	switch {
	case meta == nil && pc.Metadata != nil:
		pc.NoReqMetadata = true
	case meta != nil && !bytes.Equal(meta, pc.Metadata):
		pc.ReqMetadata = meta
	}
}

// Results builds the Results that resume the batch's run from the applied
// replies (D22–D25). Calls already taken inline are left out.
func (b *Batch) Results() deferred.Results {
	res := deferred.Results{
		Approvals: map[string]deferred.Decision{},
		Calls:     map[string]deferred.Result{},
		Metadata:  map[string]json.RawMessage{},
	}
	for _, c := range b.Calls {
		if c.Reply == nil || c.Taken {
			continue
		}
		c.Reply.addTo(&res, c)
	}
	return res
}

// addTo puts the reply to call c into res. A denial's metadata (an expired
// approval's {"reason":"expired"}, D37) goes into res.Metadata, which the
// agent keeps on the denied tool-return part, so that the history tells that
// nobody decided.
func (r *Reply) addTo(res *deferred.Results, c *PendingCall) {
	if c.Kind != deferred.KindApproval {
		res.Calls[c.ToolCallID] = r.result()
		return
	}
	res.Approvals[c.ToolCallID] = r.decision()
	// An approval's metadata (given over HTTP) is its tool's
	// ToolCallMetadata (D23).
	if len(r.Metadata) > 0 {
		if res.Metadata == nil {
			res.Metadata = map[string]json.RawMessage{}
		}
		res.Metadata[c.ToolCallID] = r.Metadata
	}
}

// FollowUpTrace chooses the trace contexts the batch's follow-up run
// continues: the span of the reply that completed the batch (the last one
// applied) is its parent, so that one trace runs from the paused run through
// the worker or approver into the follow-up; the paused run and the other
// replies are links. A batch completed by expiry, whose last answer has no
// span, continues the paused run's trace.
func (b *Batch) FollowUpTrace() (parent map[string]string, links []map[string]string) {
	var last *Reply
	for _, pc := range b.Calls {
		if r := pc.Reply; r != nil && !pc.Taken && (last == nil || !r.At.Before(last.At)) {
			last = r
		}
	}
	if last != nil && last.Trace != nil {
		parent = last.Trace
		if b.Trace != nil {
			links = append(links, b.Trace)
		}
	} else {
		parent = b.Trace
	}
	for _, pc := range b.Calls {
		if r := pc.Reply; r != nil && r != last && !pc.Taken && r.Trace != nil {
			links = append(links, r.Trace)
		}
	}
	return parent, links
}

func (r *Reply) decision() deferred.Decision {
	if r.Outcome == OutcomeApproved {
		return deferred.Approved{OverrideArgs: r.OverrideArgs}
	}
	return deferred.Denied{Message: r.Message}
}

func (r *Reply) result() deferred.Result {
	switch r.Outcome {
	case OutcomeRetry:
		return deferred.Retry{Message: r.Message}
	case OutcomeFailed:
		return deferred.Failed{Message: r.Message}
	}
	if r.Content != "" || len(r.Metadata) > 0 {
		return deferred.Return{Value: r.Value, Content: r.Content, Metadata: r.Metadata}
	}
	v := r.Value
	if len(v) == 0 {
		v = json.RawMessage("null")
	}
	return deferred.Value{Value: v}
}

// RunRecord finds a run by id, to read: a record may be shared with other
// copies of the state, and a change goes through runToChange. It looks
// from the newest, the one usually asked for.
func (c *State) RunRecord(id string) *RunRecord {
	if i := c.runIndexOf(id); i >= 0 {
		return c.Runs[i]
	}
	return nil
}

func (c *State) runIndexOf(id string) int {
	for i := len(c.Runs) - 1; i >= 0; i-- {
		if c.Runs[i].RunID == id {
			return i
		}
	}
	return -1
}

// runToChange finds a run by id, to change: a copy of its record, put in
// its place in c's own list.
func (c *State) runToChange(id string) *RunRecord {
	i := c.runIndexOf(id)
	if i < 0 {
		return nil
	}
	return c.changeRun(i)
}

// changeRun makes run i c's own copy and returns it.
func (c *State) changeRun(i int) *RunRecord {
	c.ownRuns(0)
	rec := *c.Runs[i]
	c.Runs[i] = &rec
	return &rec
}

// ownRuns gives c a list of runs of its own, which it may then append to
// and put other records in (appends: the number it is about to append).
// The records themselves are never changed once in a list: a change
// copies one (changeRun). Clones share the list and its records (copying
// them for every clone made each change of a long conversation cost its
// number of runs); whichever changes the list first copies its pointers.
func (c *State) ownRuns(appends int) {
	if c.runsOwned {
		return
	}
	// Room for what the caller appends and no more: a paused
	// conversation's state stays in the cache with this array.
	c.Runs = append(make([]*RunRecord, 0, len(c.Runs)+appends), c.Runs...)
	c.runsOwned = true
}

// TakeHistoryRoom reports whether c's history has room past its length
// and the caller, a run about to append to it, is the first to take it;
// any other copies the history.
func (c *State) TakeHistoryRoom() bool {
	return c.historyRoom != nil && c.historyRoom.CompareAndSwap(false, true)
}

// SetHistoryRoom gives c's history, just set from a run's, the flag of
// the room past its length that run left (nil: none): one flag however
// many copies of the state it goes to.
func (c *State) SetHistoryRoom(room *atomic.Bool) { c.historyRoom = room }

// ShareRuns makes c's list of runs no longer c's alone, so that a change
// copies it: a state is cached so, and clones of it never write to it.
func (c *State) ShareRuns() { c.runsOwned = false }
