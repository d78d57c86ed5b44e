package orchestrator

import (
	"context"
	"sync"
	"time"

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
