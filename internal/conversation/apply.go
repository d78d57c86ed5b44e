package conversation

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/wire"
)

// What a reply does to a conversation, without I/O: State.Apply, on the
// state the store read.

// Verdict is what became of a reply.
type Verdict int

const (
	VerdictApplied   Verdict = iota // recorded as the call's answer
	VerdictDuplicate                // the call was already answered; acked
	VerdictRefused                  // not acceptable; recorded, dead-lettered
	VerdictLate                     // past the call's deadline; recorded, dead-lettered
	// VerdictCounted: an approval recorded towards its call's quorum
	// (Answer.Quorum), which more approvers must reach; acked.
	VerdictCounted
	// VerdictElsewhere: a decision this replica may not judge, not holding
	// its conversation's agent config; nothing recorded, the reply is
	// handed to the other replicas (nakked). The replica says so; Apply
	// never does.
	VerdictElsewhere
)

// String is the verdict as events and audit records name it.
func (v Verdict) String() string {
	return [...]string{"applied", "duplicate", "refused", "late", "counted", "handed_over"}[v]
}

// Answer is a reply as the conversation applies it: a decision or a
// result, for call CallID of run RunID, with what its replica found about
// it.
type Answer struct {
	RunID, CallID string
	// Kind is the category the reply subject claims.
	Kind deferred.Kind
	// Decision or Result is the answer: one of them is set.
	Decision *wire.Decision
	Result   *wire.CallReply
	// TrustErr is why the decision may not count under the policy of its
	// conversation's agent.
	TrustErr error
	// Quorum is how many distinct approvers the decided call needs.
	Quorum int
	// Trace is the context of the span that consumes the reply, kept with
	// the applied reply for the follow-up it may complete.
	Trace map[string]string
	// Metadata is the metadata a decision gives an approved call's tool.
	Metadata json.RawMessage
}

// Apply records the answer in to a call of c and says what became of it,
// with why when it was not applied. Refusals are recorded too, on the call
// they were meant for.
func (c *State) Apply(in Answer, now time.Time) (Verdict, string) {
	return applyReply(c, in, now)
}

// applyReply records a reply in the conversation c (read for a CAS) and
// says what became of it. Refusals are recorded too, on the call they were
// meant for.
func applyReply(c *State, in Answer, now time.Time) (Verdict, string) {
	b := c.Batch
	if b == nil || b.RunID != in.RunID {
		if c.RunRecord(in.RunID) == nil {
			// A run id naming this conversation but none of its runs.
			return VerdictRefused, fmt.Sprintf("conversation %s has no run %s", c.ID, in.RunID)
		}
		// The run's batch is over: its calls were all answered and its
		// follow-up has taken them (or the run never paused).
		c.StaleReplies++
		if untrusted(in) {
			return VerdictRefused, in.TrustErr.Error()
		}
		if c.calledNot(in.RunID, in.CallID) {
			return VerdictRefused, fmt.Sprintf("run %s issued no call %s", in.RunID, in.CallID)
		}
		if reason := c.settledUnanswered(in.RunID, in.CallID); reason != "" {
			return VerdictLate, reason
		}
		return VerdictDuplicate, fmt.Sprintf("run %s is no longer waiting", in.RunID)
	}
	pc := b.Call(in.CallID)
	if pc == nil {
		b.UnknownReplies++
		return VerdictRefused, fmt.Sprintf("run %s issued no call %s", in.RunID, in.CallID)
	}
	refuse := func(why string) (Verdict, string) {
		pc.Refused++
		pc.LastRefusal = why
		return VerdictRefused, why
	}
	if pc.Dispatched() && in.Kind == deferred.KindApproval {
		// Its decision was applied: the call went to its workers since.
		if untrusted(in) {
			return refuse(in.TrustErr.Error())
		}
		pc.Duplicates++
		return VerdictDuplicate, fmt.Sprintf("call %s already answered", pc.ToolCallID)
	}
	if pc.Kind != in.Kind {
		if in.Kind == deferred.KindApproval {
			return refuse(fmt.Sprintf("wrong kind: a decision for external call %s", pc.ToolCallID))
		}
		return refuse(fmt.Sprintf("wrong kind: a result for approval call %s", pc.ToolCallID))
	}
	if pc.Reply != nil {
		if pc.Reply.Cancelled {
			reason := cancelledReason(c)
			pc.Late++
			pc.LastRefusal = reason
			return VerdictLate, reason
		}
		if pc.Reply.Expired {
			reason := fmt.Sprintf("call %s expired at %s", pc.ToolCallID, pc.Deadline.UTC().Format(time.RFC3339))
			pc.Late++
			pc.LastRefusal = reason
			return VerdictLate, reason
		}
		if untrusted(in) {
			return refuse(in.TrustErr.Error())
		}
		pc.Duplicates++
		return VerdictDuplicate, fmt.Sprintf("call %s already answered", pc.ToolCallID)
	}
	if in.Decision != nil {
		if in.Decision.ArgsDigest != pc.ArgsDigest {
			return refuse(fmt.Sprintf("args digest of call %s does not match", pc.ToolCallID))
		}
		if untrusted(in) {
			return refuse(in.TrustErr.Error())
		}
	}
	if !now.Before(pc.Deadline) {
		pc.Reply = expiredReply(pc, now)
		pc.Late++
		reason := fmt.Sprintf("call %s expired at %s", pc.ToolCallID, pc.Deadline.UTC().Format(time.RFC3339))
		pc.LastRefusal = reason
		return VerdictLate, reason
	}
	if d := in.Decision; d != nil && d.Approved && in.Quorum > 1 {
		if slices.Contains(pc.Approvals, d.ApproverID) {
			pc.Duplicates++
			return VerdictDuplicate, fmt.Sprintf("approver %s already approved call %s", d.ApproverID, pc.ToolCallID)
		}
		pc.Approvals = append(pc.Approvals, d.ApproverID)
		if len(pc.Approvals) < in.Quorum {
			return VerdictCounted, fmt.Sprintf("approval %d of %d for call %s", len(pc.Approvals), in.Quorum, pc.ToolCallID)
		}
	}
	pc.Reply = replyOf(in, now)
	pc.Reply.Trace = in.Trace
	// Answered, so it was published: nothing publishes it again.
	pc.Published = true
	if d := in.Decision; d != nil {
		c.Decisions = append(c.Decisions, DecisionRecord{
			RunID: in.RunID, ToolCallID: pc.ToolCallID, ToolName: pc.ToolName,
			Approved: d.Approved, Message: pc.Reply.Message, OverrideArgs: pc.Reply.OverrideArgs, ApproverID: d.ApproverID, At: now,
		})
	}
	return VerdictApplied, ""
}

// calledNot reports whether the history holds the model responses of run
// and none of them calls callID: a reply to it, once the run's batch is
// over, is no repeat of an answer but one for a call never made, refused
// (and so audited) as it would have been while the batch waited. When the
// history holds no response of the run it cannot be told, and a repeat is
// assumed. Only replies to a run no longer waiting come here, rarely: the
// history is not indexed for them.
func (c *State) calledNot(runID, callID string) bool {
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
func untrusted(in Answer) bool { return in.Decision != nil && in.TrustErr != nil }

func replyOf(in Answer, now time.Time) *Reply {
	if d := in.Decision; d != nil {
		r := &Reply{By: d.ApproverID, At: now}
		if d.Approved {
			r.Outcome = OutcomeApproved
			if len(d.OverrideArgs) > 0 && string(d.OverrideArgs) != "null" {
				r.OverrideArgs = d.OverrideArgs
			}
			r.Metadata = in.Metadata
		} else {
			r.Outcome = OutcomeDenied
			r.Message = d.Message
			if r.Message == "" {
				r.Message = deferred.DefaultDenyMessage
			}
		}
		return r
	}
	res := in.Result
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

// settledUnanswered says why a reply to call callID of run runID, whose
// batch is over, is late (D37): the result the history holds for the call
// is the orchestrator's own, the call having expired or its conversation
// been cancelled, so the reply came after the call was settled without it.
// Such a reply is refused and recorded as a late one is while the batch
// waits; counting it a repeat, as before, left no event, dead letter nor
// audit record of it. It returns "" when the call was answered by a reply
// (a later one is a repeat) or the history holds no result for it. Only
// replies to a run no longer waiting come here, rarely: the history is not
// indexed for them.
func (c *State) settledUnanswered(runID, callID string) string {
	called := false
	for i := range c.History {
		m := &c.History[i]
		for j := range m.Parts {
			p := &m.Parts[j]
			if p.ToolCallID != callID {
				continue
			}
			switch {
			case m.Kind == agent.KindResponse && m.RunID == runID && p.Kind == agent.PartToolCall:
				called = true
			case called && p.Kind == agent.PartToolReturn:
				return settledReason(c, p)
			case called && p.Kind == agent.PartRetryPrompt:
				return ""
			}
		}
	}
	return ""
}

// settledReason is why a reply after the result p is late, or "" when p
// is an answer that came.
func settledReason(c *State, p *agent.Part) string {
	var msg string
	_ = json.Unmarshal(p.Value, &msg)
	var meta struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(p.Metadata, &meta)
	switch {
	case p.Outcome == agent.OutcomeDenied && meta.Reason == "cancelled",
		p.Outcome == agent.OutcomeFailed && msg == CancelledMessage:
		return cancelledReason(c)
	case p.Outcome == agent.OutcomeDenied && meta.Reason == "expired",
		p.Outcome == agent.OutcomeFailed && msg == ExpiredCallMessage:
		return fmt.Sprintf("call %s expired before this reply came", p.ToolCallID)
	}
	return ""
}
