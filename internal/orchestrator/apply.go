package orchestrator

import (
	"fmt"
	"slices"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/wire"
)

// What a reply does to a conversation, without I/O: the transition Apply
// (machine.go) calls applyReply on the state the store read.

// verdict is what became of a reply.
type verdict int

const (
	verdictApplied   verdict = iota // recorded as the call's answer
	verdictDuplicate                // the call was already answered; acked
	verdictRefused                  // not acceptable; recorded, dead-lettered
	verdictLate                     // past the call's deadline; recorded, dead-lettered
	// verdictCounted: an approval recorded towards its call's quorum
	// (ToolConfig.Approvals), which more approvers must reach; acked.
	verdictCounted
	// verdictElsewhere: a decision this replica may not judge, not holding
	// its conversation's agent config (policy.go); nothing recorded, the
	// reply is handed to the other replicas (nakked).
	verdictElsewhere
)

func (v verdict) String() string {
	return [...]string{"applied", "duplicate", "refused", "late", "counted", "handed_over"}[v]
}

// applyReply records a reply in the conversation c (read for a CAS) and
// says what became of it. Refusals are recorded too, on the call they were
// meant for.
func applyReply(c *Conversation, in incoming, now time.Time) (verdict, string) {
	b := c.Batch
	if b == nil || b.RunID != in.runID {
		if c.runRecord(in.runID) == nil {
			// A run id naming this conversation but none of its runs.
			return verdictRefused, fmt.Sprintf("conversation %s has no run %s", c.ID, in.runID)
		}
		// The run's batch is over: its calls were all answered and its
		// follow-up has taken them (or the run never paused).
		c.StaleReplies++
		if untrusted(in) {
			return verdictRefused, in.trustErr.Error()
		}
		if c.calledNot(in.runID, in.callID) {
			return verdictRefused, fmt.Sprintf("run %s issued no call %s", in.runID, in.callID)
		}
		if reason := c.settledUnanswered(in.runID, in.callID); reason != "" {
			return verdictLate, reason
		}
		return verdictDuplicate, fmt.Sprintf("run %s is no longer waiting", in.runID)
	}
	pc := b.call(in.callID)
	if pc == nil {
		b.UnknownReplies++
		return verdictRefused, fmt.Sprintf("run %s issued no call %s", in.runID, in.callID)
	}
	refuse := func(why string) (verdict, string) {
		pc.Refused++
		pc.LastRefusal = why
		return verdictRefused, why
	}
	if pc.dispatched() && in.kind == deferred.KindApproval {
		// Its decision was applied: the call went to its workers since.
		if untrusted(in) {
			return refuse(in.trustErr.Error())
		}
		pc.Duplicates++
		return verdictDuplicate, fmt.Sprintf("call %s already answered", pc.ToolCallID)
	}
	if pc.Kind != in.kind {
		if in.kind == deferred.KindApproval {
			return refuse(fmt.Sprintf("wrong kind: a decision for external call %s", pc.ToolCallID))
		}
		return refuse(fmt.Sprintf("wrong kind: a result for approval call %s", pc.ToolCallID))
	}
	if pc.Reply != nil {
		if pc.Reply.Cancelled {
			reason := cancelledReason(c)
			pc.Late++
			pc.LastRefusal = reason
			return verdictLate, reason
		}
		if pc.Reply.Expired {
			reason := fmt.Sprintf("call %s expired at %s", pc.ToolCallID, pc.Deadline.UTC().Format(time.RFC3339))
			pc.Late++
			pc.LastRefusal = reason
			return verdictLate, reason
		}
		if untrusted(in) {
			return refuse(in.trustErr.Error())
		}
		pc.Duplicates++
		return verdictDuplicate, fmt.Sprintf("call %s already answered", pc.ToolCallID)
	}
	if in.decision != nil {
		if in.decision.ArgsDigest != pc.ArgsDigest {
			return refuse(fmt.Sprintf("args digest of call %s does not match", pc.ToolCallID))
		}
		if untrusted(in) {
			return refuse(in.trustErr.Error())
		}
	}
	if !now.Before(pc.Deadline) {
		pc.Reply = expiredReply(pc, now)
		pc.Late++
		reason := fmt.Sprintf("call %s expired at %s", pc.ToolCallID, pc.Deadline.UTC().Format(time.RFC3339))
		pc.LastRefusal = reason
		return verdictLate, reason
	}
	if d := in.decision; d != nil && d.Approved && in.quorum > 1 {
		if slices.Contains(pc.Approvals, d.ApproverID) {
			pc.Duplicates++
			return verdictDuplicate, fmt.Sprintf("approver %s already approved call %s", d.ApproverID, pc.ToolCallID)
		}
		pc.Approvals = append(pc.Approvals, d.ApproverID)
		if len(pc.Approvals) < in.quorum {
			return verdictCounted, fmt.Sprintf("approval %d of %d for call %s", len(pc.Approvals), in.quorum, pc.ToolCallID)
		}
	}
	pc.Reply = replyOf(in, now)
	pc.Reply.Trace = in.trace
	// Answered, so it was published: nothing publishes it again.
	pc.Published = true
	if d := in.decision; d != nil {
		c.Decisions = append(c.Decisions, DecisionRecord{
			RunID: in.runID, ToolCallID: pc.ToolCallID, ToolName: pc.ToolName,
			Approved: d.Approved, Message: pc.Reply.Message, OverrideArgs: pc.Reply.OverrideArgs, ApproverID: d.ApproverID, At: now,
		})
	}
	return verdictApplied, ""
}

// calledNot reports whether the history holds the model responses of run
// and none of them calls callID: a reply to it, once the run's batch is
// over, is no repeat of an answer but one for a call never made, refused
// (and so audited) as it would have been while the batch waited. When the
// history holds no response of the run it cannot be told, and a repeat is
// assumed. Only replies to a run no longer waiting come here, rarely: the
// history is not indexed for them.
func (c *Conversation) calledNot(runID, callID string) bool {
	responded := false
	for i := range c.History {
		m := &c.History[i]
		if m.Kind != agent.KindResponse || m.RunID != runID {
			continue
		}
		responded = true
		for j := range m.Parts {
			if p := &m.Parts[j]; p.Kind == agent.PartToolCall && p.ToolCallID == callID {
				return false
			}
		}
	}
	return responded
}

// untrusted reports whether in is a decision whose signer is not trusted:
// it is refused whatever became of its call, so that the audit, which
// keeps refusals and not repeats, shows who tried, even after the call
// was answered or its batch ended.
func untrusted(in incoming) bool { return in.decision != nil && in.trustErr != nil }

func replyOf(in incoming, now time.Time) *Reply {
	if d := in.decision; d != nil {
		r := &Reply{By: d.ApproverID, At: now}
		if d.Approved {
			r.Outcome = OutcomeApproved
			if len(d.OverrideArgs) > 0 && string(d.OverrideArgs) != "null" {
				r.OverrideArgs = d.OverrideArgs
			}
			r.Metadata = in.meta
		} else {
			r.Outcome = OutcomeDenied
			r.Message = d.Message
			if r.Message == "" {
				r.Message = deferred.DefaultDenyMessage
			}
		}
		return r
	}
	res := in.result
	r := &Reply{By: res.WorkerID, At: now}
	switch res.Outcome {
	case wire.OutcomeRetry:
		r.Outcome, r.Message = OutcomeRetry, res.Message
	case wire.OutcomeFailed:
		r.Outcome, r.Message = OutcomeFailed, res.Message
	default:
		r.Outcome, r.Value, r.Content, r.Metadata = OutcomeReturn, res.Value, res.Content, res.Metadata
	}
	return r
}
