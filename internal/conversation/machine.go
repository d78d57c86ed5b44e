package conversation

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
)

// The transitions of the state machine the package doc draws.

// CancelledMessage is the message of a call settled by a cancel.
const CancelledMessage = "cancelled"

// errNotRunning refuses a transition that needs a run under way.
var errNotRunning = errors.New("conversation is not running")

// HoldsLease reports whether owner holds the lease of run runID. It does not
// look at the lease's expiry: a replica whose lease ran out still owns the
// run until another one takes it over (TakeOver), which replaces the lease.
func (c *State) HoldsLease(owner, runID string) bool {
	return c.Lease != nil && c.Lease.Owner == owner && c.Lease.RunID == runID
}

// LeaseLive reports whether a lease is held and not past its Until.
func (c *State) LeaseLive(now time.Time) bool {
	return c.Lease != nil && c.Lease.Until.After(now)
}

// New is the state of a new conversation whose first run, rec,
// is executed under lease.
func New(id string, rec RunRecord, lease *Lease, now time.Time) *State {
	return &State{
		ID: id, Status: StatusRunning, Runs: []*RunRecord{&rec},
		Lease: lease, CreatedAt: now, UpdatedAt: now,
	}
}

// Start begins run rec of a finished conversation under lease. It reports
// repeat when the run is already recorded (a retried start), changing
// nothing; a conversation that is not finished refuses it (*ConflictError).
func (c *State) Start(rec RunRecord, lease *Lease, now time.Time) (repeat bool, err error) {
	if c.RunRecord(rec.RunID) != nil {
		return true, nil
	}
	if !c.Status.Terminal() {
		return false, &ConflictError{ConversationID: c.ID, Status: c.Status}
	}
	b := c.Batch
	c.Status = StatusRunning
	c.Output, c.Error = "", ""
	c.Batch = nil
	if b != nil && b.Complete() {
		if paused := c.RunRecord(b.RunID); paused != nil && paused.Status == StatusPaused {
			// Cancelled while paused: the history ends with the batch's
			// calls, so the new run resumes with their cancelled results
			// and the prompt, which answers every call the model made.
			b.FollowUpRunID = rec.RunID
			c.Batch = b
		}
	}
	c.Lease = lease
	c.ownRuns(1)
	c.Runs = append(c.Runs, &rec)
	c.UpdatedAt = now
	return false, nil
}

// endRun drops owner's lease on run runID and returns its record (added if
// missing), stamped as ended.
func (c *State) endRun(owner, runID string, now time.Time) (*RunRecord, error) {
	if !c.HoldsLease(owner, runID) {
		return nil, ErrLeaseLost
	}
	c.Lease = nil
	c.UpdatedAt = now
	rec := c.runToChange(runID)
	if rec == nil {
		rec = &RunRecord{RunID: runID, StartedAt: now}
		c.Runs = append(c.Runs, rec)
	}
	rec.EndedAt = now
	return rec, nil
}

// Pause ends run runID with the batch it deferred; history is the whole
// history the run ended with.
func (c *State) Pause(owner, runID string, history []agent.Message, b *Batch, now time.Time) error {
	rec, err := c.endRun(owner, runID, now)
	if err != nil {
		return err
	}
	c.History = history
	c.Status, rec.Status = StatusPaused, StatusPaused
	c.Batch = b
	return nil
}

// Complete ends run runID with its output.
func (c *State) Complete(owner, runID string, history []agent.Message, output string, now time.Time) error {
	rec, err := c.endRun(owner, runID, now)
	if err != nil {
		return err
	}
	c.History = history
	c.Status, rec.Status = StatusCompleted, StatusCompleted
	c.Output, c.Error = output, ""
	c.Batch = nil
	return nil
}

// Fail ends run runID with reason; the history stays as the run found it.
func (c *State) Fail(owner, runID, reason string, now time.Time) error {
	rec, err := c.endRun(owner, runID, now)
	if err != nil {
		return err
	}
	c.Status, rec.Status = StatusFailed, StatusFailed
	c.Error, rec.Error = reason, reason
	c.Batch = nil
	return nil
}

// Renew extends owner's lease on run runID to until.
func (c *State) Renew(owner, runID string, until time.Time) error {
	if !c.HoldsLease(owner, runID) {
		return ErrLeaseLost
	}
	c.Lease.Until = until
	return nil
}

// Release lets owner's lease on run runID expire now, so that a replica
// relaunches the run at once; it reports whether there was one to release.
func (c *State) Release(owner, runID string) bool {
	if !c.HoldsLease(owner, runID) {
		return false
	}
	c.Lease.Until = time.Time{}
	return true
}

// TakeOver gives owner the lease of the run of a running or resuming
// conversation whose lease expired, and returns that run's id; "" when there
// is nothing to take over. A conversation that records no running run
// cannot go on and fails (failed reports it).
func (c *State) TakeOver(owner string, now time.Time, ttl time.Duration) (runID string, failed bool) {
	if c.Status != StatusRunning && c.Status != StatusResuming {
		return "", false
	}
	if c.LeaseLive(now) {
		return "", false
	}
	switch {
	case c.Status == StatusResuming && c.Batch != nil && c.Batch.FollowUpRunID != "":
		runID = c.Batch.FollowUpRunID
	case c.Lease != nil && c.Lease.RunID != "":
		runID = c.Lease.RunID
	default:
		for i := len(c.Runs) - 1; i >= 0; i-- {
			if c.Runs[i].Status == StatusRunning {
				runID = c.Runs[i].RunID
				break
			}
		}
	}
	if runID == "" {
		c.Status = StatusFailed
		c.Error = "run lost: no running run recorded"
		c.Lease = nil
		c.UpdatedAt = now
		return "", true
	}
	c.Lease = &Lease{Owner: owner, RunID: runID, Until: now.Add(ttl)}
	c.UpdatedAt = now
	return runID, false
}

// Claim takes a complete, unclaimed batch for its follow-up run followUp,
// which owner executes under a lease of ttl; it reports whether it did. The
// write of the claimed state is what makes the claim exactly-once (D35).
func (c *State) Claim(owner, followUp string, now time.Time, ttl time.Duration) bool {
	if !c.claimable() {
		return false
	}
	c.Status = StatusResuming
	c.Batch.FollowUpRunID = followUp
	c.Lease = &Lease{Owner: owner, RunID: followUp, Until: now.Add(ttl)}
	c.ownRuns(1)
	c.Runs = append(c.Runs, &RunRecord{RunID: followUp, Status: StatusRunning, Prompt: c.Batch.Prompt, StartedAt: now})
	c.UpdatedAt = now
	return true
}

// AddPrompt gives a paused conversation a prompt that its follow-up run
// (runID) sends after the batch's results; the claim uses runID. It
// reports repeat when runID is already the conversation's (a retried
// request), changing nothing. A second prompt while the first waits, or a
// conversation that is not paused, refuses it (*ConflictError); runID
// already queued with another prompt is ErrOtherPrompt.
func (c *State) AddPrompt(runID, prompt string, now time.Time) (repeat bool, err error) {
	if c.RunRecord(runID) != nil {
		return true, nil
	}
	if c.Status != StatusPaused || c.Batch == nil || c.Batch.Inline {
		return false, &ConflictError{ConversationID: c.ID, Status: c.Status}
	}
	if c.Batch.PromptRunID == runID {
		if c.Batch.Prompt != prompt {
			return false, ErrOtherPrompt
		}
		return true, nil
	}
	if c.Batch.Prompt != "" {
		return false, &ConflictError{ConversationID: c.ID, Status: c.Status, Op: OpSecondPrompt}
	}
	c.Batch.Prompt, c.Batch.PromptRunID = prompt, runID
	c.UpdatedAt = now
	return false, nil
}

// claimable reports whether the batch is complete and not yet claimed.
func (c *State) claimable() bool {
	return c.Status == StatusPaused && c.Batch != nil && !c.Batch.Inline && c.Batch.Complete()
}

// Dispatch turns approval call callID, just approved, into the external
// call its tool's workers answer: the call is then pending again, under its
// call deadline and kind, with the decision kept as its Approval, and the
// batch is complete once the worker's result is in. Its follow-up then gets
// that result (the call listed as external in the batch's Requests) and
// asks the model, where it would otherwise run the approved call only to
// defer it again and pause (D23, D26): one run per approval less. The
// worker gets the decision's override args, if any, which the caller has
// validated against the tool's schema (D24). It reports whether it did; a
// call of a batch an inline wait holds is not dispatched (the waiting run
// takes it).
func (c *State) Dispatch(callID string, now time.Time) bool {
	b := c.Batch
	if c.Status != StatusPaused || b == nil || b.Inline {
		return false
	}
	pc := b.Call(callID)
	if pc == nil || pc.Kind != deferred.KindApproval || pc.Dispatch <= 0 || pc.Reply == nil ||
		pc.Reply.Outcome != OutcomeApproved {
		return false
	}
	pc.Approval, pc.Reply = pc.Reply, nil
	pc.Kind = deferred.KindCall
	pc.Deadline = now.Add(pc.Dispatch)
	pc.Dispatch = 0
	// Published by whoever dispatched it, or by reconcile, which publishes
	// what is unmarked; the time to its result counts from here.
	pc.Published, pc.PublishedAt = false, now
	c.UpdatedAt = now
	return true
}

// Dispatched reports whether pc is an approved call sent to its workers
// (State.Dispatch).
func (pc *PendingCall) Dispatched() bool { return pc.Approval != nil }

// RunArgs are the args the call runs with: those it was approved with,
// for a dispatched call approved with override args (D24), else the
// model's.
func (pc *PendingCall) RunArgs() json.RawMessage {
	if pc.Approval != nil && len(pc.Approval.OverrideArgs) > 0 {
		return pc.Approval.OverrideArgs
	}
	return pc.Args
}

// Expire settles the batch's pending calls whose deadline has passed (D37)
// and returns them.
func (c *State) Expire(now time.Time) []*PendingCall {
	if c.Batch == nil || c.Status == StatusCancelled {
		return nil
	}
	var expired []*PendingCall
	for _, pc := range c.Batch.Calls {
		if pc.Reply == nil && !now.Before(pc.Deadline) {
			pc.Reply = expiredReply(pc, now)
			expired = append(expired, pc)
		}
	}
	if len(expired) > 0 {
		c.UpdatedAt = now
	}
	return expired
}

// Escalate marks the approval calls whose escalation time has passed
// unanswered as escalated (their tool's EscalateTo may decide them too)
// and returns them.
func (c *State) Escalate(now time.Time) []*PendingCall {
	if c.Batch == nil || c.Status.Ended() {
		return nil
	}
	var out []*PendingCall
	for _, pc := range c.Batch.Calls {
		if at := pc.escalation(); !at.IsZero() && !now.Before(at) {
			// Replaced, not changed: a clone shares it (State.clone).
			e := *pc.Escalation
			e.Done = true
			pc.Escalation = &e
			out = append(out, pc)
		}
	}
	if len(out) > 0 {
		c.UpdatedAt = now
	}
	return out
}

// Cancel ends a conversation that is not finished: its pending approvals are
// denied and its pending external calls failed with CancelledMessage, the
// lease of a run under way is dropped (the run's result is then refused as
// lease lost), and later replies are refused as late. It returns the calls it
// settled; a finished conversation refuses it (*ConflictError).
func (c *State) Cancel(reason string, now time.Time) ([]*PendingCall, error) {
	if c.Status.Ended() {
		return nil, &ConflictError{ConversationID: c.ID, Status: c.Status}
	}
	if reason == "" {
		reason = CancelledMessage
	}
	var settled []*PendingCall
	if c.Batch != nil {
		for _, pc := range c.Batch.Calls {
			if pc.Reply != nil {
				continue
			}
			r := &Reply{Outcome: OutcomeFailed, Message: reason, By: expiredBy, At: now, Cancelled: true}
			if pc.Kind == deferred.KindApproval {
				r.Outcome = OutcomeDenied
				r.Metadata = cancelledMetadata
			}
			pc.Reply = r
			settled = append(settled, pc)
		}
		c.Batch.Inline = false
	}
	for i := range c.Runs {
		if c.Runs[i].EndedAt.IsZero() {
			rec := c.changeRun(i)
			rec.Status, rec.EndedAt = StatusCancelled, now
		}
	}
	c.Status = StatusCancelled
	c.Error = reason
	c.Lease = nil
	c.UpdatedAt = now
	return settled, nil
}

// workingRuns lists the runs of an unfinished conversation that may still
// be working: the paused run whose calls are out, and the run under lease.
func (c *State) workingRuns() []string {
	var runs []string
	if c.Batch != nil && c.Status == StatusPaused {
		runs = append(runs, c.Batch.RunID)
	}
	if c.Lease != nil && c.Lease.RunID != "" && (len(runs) == 0 || runs[0] != c.Lease.RunID) {
		runs = append(runs, c.Lease.RunID)
	}
	return runs
}

// Delete marks a finished conversation deleted and forgets its answer, so
// that the tombstone holds no content; one under way refuses it
// (*ConflictError).
func (c *State) Delete(now time.Time) error {
	if !c.Status.Terminal() {
		return &ConflictError{ConversationID: c.ID, Status: c.Status, Op: OpDelete}
	}
	c.Status = StatusDeleted
	c.Output, c.Error = "", ""
	c.Lease = nil
	c.UpdatedAt = now
	return nil
}

// cancelledMetadata is the reason a cancelled approval carries.
var cancelledMetadata = json.RawMessage(`{"reason":"cancelled"}`)

// BeginInline records the batch a run defers in its inline wait, while owner
// still holds the run.
func (c *State) BeginInline(owner, runID string, b *Batch, now time.Time) error {
	if !c.HoldsLease(owner, runID) {
		return ErrLeaseLost
	}
	b.Inline = true
	c.Batch = b
	c.UpdatedAt = now
	return nil
}

// TakeInline marks the replies that arrived during run runID's inline wait,
// for the calls req asked about, as taken and returns them; nil when none.
func (c *State) TakeInline(runID string, req *deferred.Requests, now time.Time) *deferred.Results {
	if c.Batch == nil || c.Batch.RunID != runID || !c.Batch.Inline {
		return nil
	}
	out := deferred.Results{Approvals: map[string]deferred.Decision{}, Calls: map[string]deferred.Result{}, Metadata: map[string]json.RawMessage{}}
	n := 0
	for _, pc := range c.Batch.Calls {
		if pc.Reply == nil || pc.Taken || !offered(req, pc) {
			continue
		}
		pc.Taken = true
		n++
		pc.Reply.addTo(&out, pc)
	}
	if n == 0 {
		return nil
	}
	c.UpdatedAt = now
	return &out
}

// MarkPublished records that the calls ids of run runID's batch were
// published; it reports whether anything changed. It is the store's own
// account of what it sent, not a change the conversation's users see, so
// the conversation's UpdatedAt stays (and the record holds only the marks).
func (c *State) MarkPublished(runID string, ids []string, now time.Time) bool {
	if c.Batch == nil || c.Batch.RunID != runID {
		return false
	}
	changed := false
	for _, id := range ids {
		if pc := c.Batch.Call(id); pc != nil && !pc.Published {
			pc.Published = true
			if pc.PublishedAt.IsZero() {
				pc.PublishedAt = now
			}
			changed = true
		}
	}
	return changed
}

// cancelledReason is the late reason of a reply to a cancelled conversation.
func cancelledReason(c *State) string {
	return fmt.Sprintf("conversation %s was cancelled", c.ID)
}

// Abort fails a conversation that cannot go on, whichever replica holds its
// run: the run under way and the batch are dropped (later replies to it are
// acked as no longer awaited), the reason is kept. It reports whether it
// changed anything; a finished conversation is left as it is.
func (c *State) Abort(reason string, now time.Time) bool {
	if c.Status.Ended() {
		return false
	}
	for i := range c.Runs {
		if c.Runs[i].EndedAt.IsZero() {
			rec := c.changeRun(i)
			rec.Status, rec.EndedAt, rec.Error = StatusFailed, now, reason
		}
	}
	c.Status = StatusFailed
	c.Error = reason
	c.Lease = nil
	c.Batch = nil
	c.UpdatedAt = now
	return true
}

// offered reports whether the call is one the handler was asked about, in
// the same category.
func offered(req *deferred.Requests, pc *PendingCall) bool {
	list := req.Calls
	if pc.Kind == deferred.KindApproval {
		list = req.Approvals
	}
	for _, c := range list {
		if c.ToolCallID == pc.ToolCallID {
			return true
		}
	}
	return false
}

// Messages of calls settled by expiry (D37).
const (
	ExpiredApprovalMessage = "approval expired"
	ExpiredCallMessage     = "timed out"
)

// expiredMetadata is the reason an expired approval carries.
var expiredMetadata = json.RawMessage(`{"reason":"expired"}`)

// expiredBy names the orchestrator as the one that settled an expired call.
const expiredBy = "orchestrator"

func expiredReply(pc *PendingCall, now time.Time) *Reply {
	if pc.Kind == deferred.KindApproval {
		return &Reply{Outcome: OutcomeDenied, Message: ExpiredApprovalMessage, Metadata: expiredMetadata, By: expiredBy, At: now, Expired: true}
	}
	return &Reply{Outcome: OutcomeFailed, Message: ExpiredCallMessage, By: expiredBy, At: now, Expired: true}
}
