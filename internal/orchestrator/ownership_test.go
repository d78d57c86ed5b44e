package orchestrator_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// waitPartitioned waits until the replicas own every reply partition
// between them, each exactly once: each sees the others.
func waitPartitioned(t *testing.T, os ...*orchestrator.Orchestrator) {
	t.Helper()
	waitFor(t, "the replicas to share the reply partitions", func() (bool, string) {
		seen := map[int]int{}
		var n int
		var shares []string
		for _, o := range os {
			owned, of := o.ReplyPartitions()
			n = of
			shares = append(shares, fmt.Sprint(owned))
			for _, p := range owned {
				seen[p]++
			}
		}
		if n == 0 || len(seen) != n {
			return false, fmt.Sprint(shares)
		}
		for _, c := range seen {
			if c != 1 {
				return false, fmt.Sprint(shares)
			}
		}
		return true, ""
	})
}

// Replies come back to the replica that started the run, which applies
// them from the state it holds and runs the follow-up there: with two
// replicas each starting half the conversations, each applies the replies
// of its own half and nothing of the other's.
func TestRepliesComeBackToTheReplicaThatStartedTheRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker("calculate_answer")
	cfg := externalAgent(t, "")
	o1, _ := e.orch(orchestrator.Config{Agent: cfg, InstanceID: "one"})
	o2, _ := e.orch(orchestrator.Config{Agent: cfg, InstanceID: "two"})
	waitPartitioned(t, o1, o2)
	const n = 8
	started := map[string]*orchestrator.Orchestrator{}
	for i := range 2 * n {
		o := []*orchestrator.Orchestrator{o1, o2}[i%2]
		info, err := o.StartRun(ctxT(t), "What is the answer?", "")
		if err != nil {
			t.Fatal(err)
		}
		started[info.ConversationID] = o
	}
	for id, o := range started {
		c := waitStatus(t, o1, id, conversation.StatusCompleted, conversation.StatusFailed)
		if c.Status != conversation.StatusCompleted || len(c.Runs) != 2 {
			t.Fatalf("%s: %s", id, describe(c))
		}
		owned, of := o.ReplyPartitions()
		for _, r := range c.Runs {
			if p := bus.ReplyPartition(r.RunID, of); !slices.Contains(owned, p) {
				t.Errorf("%s: run %s in partition %d, not one of its replica's %v", id, r.RunID, p, owned)
			}
		}
	}
	waitFor(t, "every reply to be counted", func() (bool, string) {
		a1, a2 := o1.Stats().RepliesApplied.Load(), o2.Stats().RepliesApplied.Load()
		return a1+a2 >= 2*n, fmt.Sprintf("applied %d + %d", a1, a2)
	})
	for i, o := range []*orchestrator.Orchestrator{o1, o2} {
		if a, f := o.Stats().RepliesApplied.Load(), o.Stats().FollowUps.Load(); a != n || f != n {
			t.Errorf("replica %d applied %d replies and followed up %d, want %d of each (its own)", i+1, a, f, n)
		}
	}
}

// Partitions move when a replica leaves and when one joins, and a
// replica that leaves while its conversations wait on calls hands them
// over: the calls' results, stored in its partitions, are applied by the
// replicas that take them, each once, and every follow-up runs once.
func TestPartitionsMoveOnLeaveAndJoin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := externalAgent(t, "")
	lease := orchestrator.Config{Agent: cfg, LeaseTTL: 3 * time.Second}
	with := func(id string) orchestrator.Config { c := lease; c.InstanceID = id; return c }
	o1, _ := e.orch(with("one"))
	o2, _ := e.orch(with("two"))
	o3, stop3 := e.orch(with("three"))
	waitPartitioned(t, o1, o2, o3)

	// Paused on calls no worker takes yet, in o3's partitions.
	const n = 6
	var ids []string
	for range n {
		info, err := o3.StartRun(ctxT(t), "What is the answer?", "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ConversationID)
	}
	for _, id := range ids {
		waitPublished(t, o3, id, 1)
	}
	stop3()
	waitPartitioned(t, o1, o2)

	e.worker("calculate_answer")
	for _, id := range ids {
		c := waitStatus(t, o1, id, conversation.StatusCompleted, conversation.StatusFailed)
		if c.Status != conversation.StatusCompleted || len(c.Runs) != 2 {
			t.Fatalf("%s: %s", id, describe(c))
		}
	}
	counts := func() (int64, int64) {
		var a, f int64
		for _, o := range []*orchestrator.Orchestrator{o1, o2, o3} {
			a += o.Stats().RepliesApplied.Load()
			f += o.Stats().FollowUps.Load()
		}
		return a, f
	}
	waitFor(t, "every reply to be counted", func() (bool, string) {
		a, f := counts()
		return a >= n, fmt.Sprintf("applied %d, follow-ups %d", a, f)
	})
	if a, f := counts(); a != n || f != n {
		t.Errorf("applied %d replies and followed up %d, want %d of each", a, f, n)
	}

	o4, _ := e.orch(with("four"))
	waitPartitioned(t, o1, o2, o4)
}

// A replica that claims a batch of a conversation whose agent it does not
// run hands the follow-up over with an id in a partition of a replica
// that runs the agent: the follow-up's replies go there, not back to the
// replica that handed it over.
func TestHandedOverFollowUpInTheAgentsReplicasPartition(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, ca := namedAgent(t, "alpha", "")
	_, cb := namedAgent(t, "beta", "")
	ca.InstanceID, ca.ReconcileInterval = "A", 1<<40
	cb.InstanceID, cb.ReconcileInterval = "B", 1<<40
	a, _ := e.orch(ca)
	b, _ := e.orch(cb)
	waitPartitioned(t, a, b)
	// B stores the start and hands it to A; its run id is B's, so B gets
	// the reply and claims the follow-up.
	info, err := b.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: "What is the answer?", Agent: "alpha"})
	if err != nil {
		t.Fatal(err)
	}
	e.worker("calculate_answer")
	c := waitStatus(t, b, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || len(c.Runs) != 2 {
		t.Fatalf("%s", describe(c))
	}
	owned, of := a.ReplyPartitions()
	if p := bus.ReplyPartition(c.Runs[1].RunID, of); !slices.Contains(owned, p) {
		t.Errorf("follow-up %s in partition %d, not one of A's %v", c.Runs[1].RunID, p, owned)
	}
	if n := b.Stats().HandedOver.Load(); n < 1 {
		t.Errorf("B handed over %d runs", n)
	}
}
