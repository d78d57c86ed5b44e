package orchestrator

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/wire"
)

// groupProbe is a groupCommit whose state and commits a test sets and
// sees, with no server.
type groupProbe struct {
	g       *groupCommit
	mu      sync.Mutex
	commits [][]string // the call ids of each commit, in order
	reads   int
	// hold, when set, keeps the first commit until it is closed.
	hold chan struct{}
}

func newGroupProbe(state *conversation.State, linger time.Duration) *groupProbe {
	p := &groupProbe{}
	p.g = &groupCommit{
		linger: linger,
		current: func(context.Context, string) (*conversation.State, uint64, error) {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.reads++
			return state, 1, nil
		},
		commit: func(_ context.Context, _ string, jobs []*replyJob, from *conversation.State, rev uint64) (*conversation.State, uint64) {
			p.mu.Lock()
			first, hold := len(p.commits) == 0, p.hold
			var ids []string
			for _, j := range jobs {
				ids = append(ids, j.in.callID)
			}
			p.commits = append(p.commits, ids)
			p.mu.Unlock()
			if first && hold != nil {
				<-hold
			}
			for _, j := range jobs {
				close(j.done)
			}
			return from, rev + 1
		},
	}
	return p
}

func (p *groupProbe) seen() ([][]string, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.commits), p.reads
}

func job(run, call string, seq uint64) *replyJob {
	return &replyJob{in: incoming{runID: run, callID: call}, seq: seq, done: make(chan struct{})}
}

// pausedOn is a paused state whose batch of run waits for calls.
func pausedOn(run string, calls ...string) *conversation.State {
	b := &conversation.Batch{RunID: run}
	for _, id := range calls {
		b.Calls = append(b.Calls, &conversation.PendingCall{ToolCallID: id})
	}
	return &conversation.State{ID: "c", Status: conversation.StatusPaused, Batch: b}
}

// recordAll records each job from a handler of its own and waits for all.
func recordAll(t *testing.T, g *groupCommit, jobs ...*replyJob) {
	t.Helper()
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Go(func() {
			if err := g.record(t.Context(), "c", j); err != nil {
				t.Errorf("record %s: %v", j.in.callID, err)
			}
		})
	}
	wg.Wait()
}

// Replies that join while the leader commits are committed together by
// the leader, from the state it wrote, in one more commit: two commits and
// one read for three replies, however their handlers interleave.
func TestGroupCommitGathersWhatJoinsMeanwhile(t *testing.T) {
	p := newGroupProbe(pausedOn("r", "a", "b", "c", "d"), -1)
	p.hold = make(chan struct{})
	first := job("r", "a", 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := p.g.record(t.Context(), "c", first); err != nil {
			t.Errorf("record a: %v", err)
		}
	}()
	waitUntil(t, "the first commit under way", func() bool { c, _ := p.seen(); return len(c) == 1 })
	later := []*replyJob{job("r", "b", 2), job("r", "c", 3)}
	var wg sync.WaitGroup
	for _, j := range later {
		wg.Go(func() { _ = p.g.record(t.Context(), "c", j) })
	}
	waitUntil(t, "both joined the group", func() bool {
		p.g.groups.mu.Lock()
		defer p.g.groups.mu.Unlock()
		return len(p.g.groups.m["c"].jobs) == 2
	})
	close(p.hold)
	wg.Wait()
	<-done
	commits, reads := p.seen()
	if len(commits) != 2 || !slices.Equal(commits[0], []string{"a"}) || len(commits[1]) != 2 || reads != 1 {
		t.Errorf("commits %v, reads %d; want [a] then b and c together, one read", commits, reads)
	}
	// The group ended: the next reply leads a new one.
	recordAll(t, p.g, job("r", "d", 4))
	if commits, _ := p.seen(); len(commits) != 3 {
		t.Errorf("commits %v, want a third for d", commits)
	}
}

// A reply that leaves its batch incomplete lingers for the others, which
// then go in one commit; one that completes the batch does not wait.
func TestGroupCommitLingersUntilTheBatchIsComplete(t *testing.T) {
	p := newGroupProbe(pausedOn("r", "a", "b"), time.Hour)
	recordAll(t, p.g, job("r", "a", 1), job("r", "b", 2))
	commits, _ := p.seen()
	if len(commits) != 1 || len(commits[0]) != 2 {
		t.Errorf("commits %v, want a and b in one (it would wait an hour otherwise)", commits)
	}
}

// A reply that leaves its batch incomplete is committed alone once the
// linger ends; a reply to another run does not linger at all.
func TestGroupCommitLingerEnds(t *testing.T) {
	p := newGroupProbe(pausedOn("r", "a", "b"), 20*time.Millisecond)
	recordAll(t, p.g, job("r", "a", 1))
	recordAll(t, p.g, job("other", "x", 2))
	if commits, _ := p.seen(); len(commits) != 2 || !slices.Equal(commits[0], []string{"a"}) || !slices.Equal(commits[1], []string{"x"}) {
		t.Errorf("commits %v, want [a] after the linger, then [x]", commits)
	}
}

// Of two answers to one call in a group, the first stored is applied and
// the other is a duplicate, whichever handler joined first.
func TestGroupAppliesInStreamOrder(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := pausedOn("r", "a")
	c.Batch.Calls[0].Kind, c.Batch.Calls[0].Deadline = deferred.KindCall, now.Add(time.Hour)
	answer := func(value string, seq uint64) *replyJob {
		j := job("r", "a", seq)
		j.in.kind = deferred.KindCall
		j.in.result = &wire.CallReply{RunID: "r", ToolCallID: "a", Outcome: wire.OutcomeReturn, Value: json.RawMessage(value)}
		return j
	}
	second, first := answer(`"second"`, 8), answer(`"first"`, 7)
	applyJobs(c, []*replyJob{second, first}, now, nil, nil)
	if r := c.Batch.Calls[0].Reply; r == nil || string(r.Value) != `"first"` {
		t.Errorf("reply = %+v, want the first stored", r)
	}
	if first.v != conversation.VerdictApplied || second.v != conversation.VerdictDuplicate {
		t.Errorf("verdicts: first %v, second %v (%s); want applied, duplicate", first.v, second.v, second.reason)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	bustest.Poll(t, bustest.Timeout, what, func() (bool, string) { return cond(), "" })
}
