package orchestrator

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/argschema"
	"github.com/toolgate/toolgate/internal/conversation"
)

// replyGroups gathers the replies being handled per conversation. The
// handler that finds no group for its conversation leads: it records every
// reply that has joined in one CAS, then those that joined meanwhile, until
// none is left. Others wait for their verdict. A batch of n replies thus
// costs far fewer than n rewrites of the conversation, and each reply is
// still acked only once its effect is stored.
type replyGroups struct {
	mu sync.Mutex
	m  map[string]*replyGroup
}

type replyGroup struct {
	jobs []*replyJob
	// joined is signalled (without blocking) when a job joins.
	joined chan struct{}
}

// join adds j to its conversation's group and reports whether the caller
// leads it.
func (g *replyGroups) join(convID string, j *replyJob) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]*replyGroup{}
	}
	grp, ok := g.m[convID]
	if !ok {
		grp = &replyGroup{joined: make(chan struct{}, 1)}
		g.m[convID] = grp
	}
	grp.jobs = append(grp.jobs, j)
	select {
	case grp.joined <- struct{}{}:
	default:
	}
	return !ok
}

// take removes the jobs waiting for convID; when there are none it ends the
// group, and the next reply leads a new one.
func (g *replyGroups) take(convID string) []*replyJob {
	g.mu.Lock()
	defer g.mu.Unlock()
	grp := g.m[convID]
	if grp == nil || len(grp.jobs) == 0 {
		delete(g.m, convID)
		return nil
	}
	jobs := grp.jobs
	grp.jobs = nil
	return jobs
}

// more removes the jobs that joined convID's group since the last take,
// keeping the group open, and returns the channel signalled at the next
// join.
func (g *replyGroups) more(convID string) ([]*replyJob, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	grp := g.m[convID]
	if grp == nil {
		return nil, nil
	}
	jobs := grp.jobs
	grp.jobs = nil
	return jobs, grp.joined
}

// Replies that leave their batch incomplete change nothing anyone waits
// for but the record: their group lingers up to Config.ReplyLinger for more
// replies, so that a large batch is recorded in a few rewrites of the
// conversation instead of one per handful of replies. The reply that
// completes the batch ends the wait at once: the follow-up is never held
// back by it. A group stops gathering at replyLingerMax jobs, so that
// lingering groups never hold every handler.
const (
	replyLinger    = 5 * time.Millisecond
	replyLingerMax = replyConcurrency / 4
)

// groupCommit records replies a group per conversation at a time
// (replyGroups): the handler that leads a group reads the state once,
// lingers for more replies while they leave its batch incomplete, and has
// the group committed by one append, then the replies that joined
// meanwhile, until none is left. It knows nothing of how a group is
// committed (Orchestrator.applyGroup) or the state read, so that its
// grouping is tested without a server.
type groupCommit struct {
	groups replyGroups
	// linger is Config.ReplyLinger; below zero, groups do not linger.
	linger time.Duration
	// current reads a conversation's state (store.current).
	current func(ctx context.Context, id string) (*conversation.State, uint64, error)
	// commit records jobs from the state from at rev (nil: it reads it),
	// gives each its verdict (closing done), and returns the state it
	// wrote while the leader may go on from it, else nil.
	commit func(ctx context.Context, id string, jobs []*replyJob, from *conversation.State, rev uint64) (*conversation.State, uint64)
}

// lingerFor gathers more jobs for convID's group while they leave its
// batch (as c, the stored state, has it) incomplete, for up to linger.
func (g *groupCommit) lingerFor(ctx context.Context, convID string, c *conversation.State, jobs []*replyJob) []*replyJob {
	if g.linger < 0 || c == nil || c.Batch == nil || c.Batch.Inline {
		return jobs
	}
	var timer *time.Timer
	for len(jobs) < replyLingerMax && !completes(c.Batch, jobs) {
		more, joined := g.groups.more(convID)
		jobs = append(jobs, more...)
		if len(more) > 0 {
			continue
		}
		if timer == nil {
			timer = time.NewTimer(g.linger)
			defer timer.Stop()
		}
		select {
		case <-joined:
		case <-timer.C:
			return jobs
		case <-ctx.Done():
			return jobs
		}
	}
	return jobs
}

// completes reports whether the jobs answer every call of b still pending,
// or cannot be told to leave it incomplete (a reply to another run).
func completes(b *conversation.Batch, jobs []*replyJob) bool {
	pending := 0
	for _, pc := range b.Calls {
		if pc.Reply == nil {
			pending++
		}
	}
	answered := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		if j.in.runID != b.RunID {
			return true
		}
		if pc := b.Call(j.in.callID); pc != nil && pc.Reply == nil {
			answered[pc.ToolCallID] = true
		}
	}
	return len(answered) >= pending
}

// record has j recorded in its conversation: by the handler that leads the
// conversation's group, which records every reply that joins it, a group
// at a time, until none is left. It returns once j has its verdict, or
// ctx ended (the leader may still record it; a redelivery is then a
// duplicate).
func (g *groupCommit) record(ctx context.Context, convID string, j *replyJob) error {
	if g.groups.join(convID, j) {
		// Each round starts from the state the last one wrote, saving a
		// read while no one else wrote meanwhile.
		var (
			c   *conversation.State
			rev uint64
		)
		for jobs := g.groups.take(convID); jobs != nil; jobs = g.groups.take(convID) {
			if c == nil {
				// Read now rather than in the append, to know whether to
				// linger; a failed read is left to the append to report.
				c, rev, _ = g.current(ctx, convID)
			}
			jobs = g.lingerFor(ctx, convID, c, jobs)
			c, rev = g.commit(ctx, convID, jobs, c, rev)
		}
	}
	select {
	case <-j.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

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
			if rp.tentative(ctx, from, rev, claimed, followUp, jobs) {
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
