package orchestrator

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/toolgate/toolgate/internal/argschema"
	"github.com/toolgate/toolgate/internal/conversation"
)

// applyJobs applies jobs to c in the order their replies were stored,
// whatever order their handlers joined in, and gives each its verdict and
// what it answered. A decision that approves a call dispatchable says may
// go to its workers is dispatched to them (conversation.State.Dispatch). A
// decision is judged under the policy of the agent holder gives for c (nil
// when this replica does not hold c's agent config, and the decision is
// left to the replicas that do); a nil holder judges none.
func applyJobs(c *conversation.State, jobs []*replyJob, now time.Time, dispatchable func(*conversation.State, *conversation.PendingCall) bool, holder func(*conversation.State) *agentRuntime) {
	slices.SortFunc(jobs, func(a, b *replyJob) int { return cmp.Compare(a.seq, b.seq) })
	for _, j := range jobs {
		pc := c.Batch.Call(j.in.callID)
		if c.Batch == nil || c.Batch.RunID != j.in.runID {
			pc = nil
		}
		j.tool, j.publishedAt, j.at, j.expired, j.dispatched = "", time.Time{}, now, false, nil
		if j.in.decision != nil && holder != nil {
			ag := holder(c)
			if ag == nil {
				j.v, j.reason = conversation.VerdictElsewhere, fmt.Sprintf("this replica does not hold agent %q with the conversation's config %s", c.Agent, ShortDigest(c.AgentDigest))
				continue
			}
			var tc *ToolConfig
			if pc != nil {
				tc = ag.cfg.tool(pc.ToolName)
			}
			j.in.trustErr, j.in.quorum = ag.policy.check(c, pc, tc, j.in), quorumOf(tc)
		}
		settled := pc != nil && pc.Reply != nil
		j.v, j.reason = c.Apply(j.in.answer(), now)
		if pc != nil {
			j.tool, j.publishedAt = pc.ToolName, pc.PublishedAt
			j.expired = j.v == conversation.VerdictLate && !settled
			if j.v == conversation.VerdictApplied && j.in.decision != nil && dispatchable != nil && dispatchable(c, pc) {
				if c.Dispatch(pc.ToolCallID, now) {
					sent := c.PendingCallOf(pc)
					j.dispatched = &sent
				}
			}
		}
	}
}

// applyGroup records jobs in the conversation by one CAS, starting from
// from (at rev; nil reads it) and, in the same write, claims the batch if
// they completed it; then it hands every job its verdict and moves the
// conversation on (the follow-up is launched, or the next deadline
// scheduled). It returns the state it wrote while it is still the caller's
// to reuse, else nil.
func (rp *replyPipeline) applyGroup(ctx context.Context, convID string, jobs []*replyJob, from *conversation.State, rev uint64) (*conversation.State, uint64) {
	var followUp string
	apply := func(c *conversation.State, now time.Time) ([]conversation.Effect, error) {
		applyJobs(c, jobs, now, rp.dispatchable, rp.roster.judge)
		followUp = ""
		if !slices.ContainsFunc(jobs, func(j *replyJob) bool { return j.v != conversation.VerdictElsewhere }) {
			return conversation.RepliedEffects(c, nil, ""), conversation.ErrUnchanged
		}
		c.UpdatedAt = now
		followUp = rp.fx.claimer().ClaimIn(c, now)
		return conversation.RepliedEffects(c, dispatchedIDs(jobs), followUp), nil
	}
	if from != nil && rev != 0 && from.Status == conversation.StatusPaused && from.Batch != nil && !from.Batch.Inline {
		// Replies that complete the batch: its follow-up may run before
		// they and the claim are stored, and be stored with them.
		claimed := from.Clone()
		if _, err := apply(claimed, rp.clock()); err == nil && followUp != "" {
			// Before the follow-up starts, which may end at once; should
			// the replies be recorded apart after all, they schedule again
			// what they leave waiting.
			rp.pub.batchDone(convID, from.Batch.RunID)
			if rp.cfg.ClaimWindow >= 0 && claimed.LeaseLive(rp.clock()) && !rp.stopped.Load() {
				rp.fx.deferClaim(from, rev, claimed, followUp, jobs)
				return nil, 0
			}
		}
	}
	conv, rev, err := rp.fx.doReplies(ctx, convID, from, rev, apply, jobs)
	if tl := tooLarge(err); tl != nil {
		// The results do not fit: they are recorded as failed results,
		// which the follow-up shows the model.
		for _, j := range jobs {
			j.in = shrunk(j.in, tl)
		}
		conv, rev, err = rp.fx.doReplies(ctx, convID, nil, 0, apply, jobs)
		if tl := tooLarge(err); tl != nil {
			rp.fx.failTooLarge(ctx, convID, tl)
			for _, j := range jobs {
				j.v, j.reason = conversation.VerdictRefused, tl.Error()
				rp.replyEvents(ctx, convID, j)
				close(j.done)
			}
			return nil, 0
		}
	}
	if err != nil {
		for _, j := range jobs {
			j.err = err
			close(j.done)
		}
		return nil, 0
	}
	if followUp != "" {
		return nil, 0
	}
	return conv, rev
}

// dispatchedIDs are the calls jobs approved and dispatched to their
// workers.
func dispatchedIDs(jobs []*replyJob) []string {
	var ids []string
	for _, j := range jobs {
		if j.dispatched != nil {
			ids = append(ids, j.in.callID)
		}
	}
	return ids
}

// dispatchable says whether an approved call of c may go to its workers as
// soon as its decision is applied: one of a discovered tool only while the
// tool is advertised with the args schema the call was made against (its
// follow-up would otherwise tell the model that the tool changed,
// staleApprovals); one approved with override args only once they are
// found valid against the tool's schema, which takes this replica running
// c's agent as c records it (else its follow-up validates them and makes
// invalid ones a retry prompt, D24).
func (rp *replyPipeline) dispatchable(c *conversation.State, pc *conversation.PendingCall) bool {
	if pc.SchemaDigest != "" {
		if rp.discovery.catalogue == nil {
			return false
		}
		if t, ok := rp.discovery.catalogue.Lookup(pc.ToolName); !ok || t.Digest != pc.SchemaDigest {
			return false
		}
	}
	if pc.Reply == nil || len(pc.Reply.OverrideArgs) == 0 {
		return true
	}
	ag := rp.roster.runnable(c)
	if ag == nil {
		return false
	}
	tc := rp.discovery.toolsNow(ag.cfg, pc.ToolName)
	if tc == nil {
		return false
	}
	s, err := argschema.Compile(pc.ToolName, tc.Parameters)
	return err == nil && s.Validate(pc.Reply.OverrideArgs) == nil
}
