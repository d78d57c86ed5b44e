package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// Conversations enter the due index only once they last (fresh.go); these
// tests give the replica that creates them a stopped clock, so that its
// own index loop never finds them old enough to index, and what indexes
// them is what the test is about.

// stoppedClock is a clock that never moves.
func stoppedClock() func() time.Time {
	t0 := time.Now()
	return func() time.Time { return t0 }
}

// index opens the due index.
func (e *env) index() jetstream.KeyValue {
	e.t.Helper()
	kv, err := e.connect("index").JetStream().KeyValue(ctxT(e.t), bus.BucketIndex)
	if err != nil {
		e.t.Fatal(err)
	}
	return kv
}

// indexed reports whether the index holds id's due entry.
func indexed(t *testing.T, kv jetstream.KeyValue, id string) bool {
	t.Helper()
	_, err := kv.Get(ctxT(t), "due."+id)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// A conversation answered at once never enters the index: no message is
// stored for it there.
func TestQuickConversationIsNotIndexed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker("calculate_answer")
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, "")})
	for range 3 {
		info, err := o.StartRun(ctxT(t), "What is the answer?", "")
		if err != nil {
			t.Fatal(err)
		}
		if c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed); c.Status != conversation.StatusCompleted {
			t.Fatalf("status %s: %s", c.Status, c.Error)
		}
	}
	st, err := e.connect("index").JetStream().Stream(ctxT(t), "KV_"+bus.BucketIndex)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctxT(t)); err != nil || info.State.LastSeq != 0 {
		t.Errorf("the index stored %v messages (%v); want none", info.State.LastSeq, err)
	}
}

// blockingModel is a model that waits until its run is cancelled; entered
// is signalled when it is called.
func blockingModel() (agent.Model, chan struct{}) {
	entered := make(chan struct{}, 1)
	return agent.FunctionModel("blocking", func(ctx context.Context, _ agent.ModelRequest) (agent.ModelResponse, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return agent.ModelResponse{}, ctx.Err()
	}), entered
}

// startInModel starts a run on o and waits until its model is called
// (entered, from blockingModel).
func startInModel(t *testing.T, o *orchestrator.Orchestrator, entered <-chan struct{}) orchestrator.RunInfo {
	t.Helper()
	info, err := o.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(waitTimeout):
		t.Fatal("the model was never called")
	}
	return info
}

// killedReplica starts a replica with a stopped clock, starts a
// conversation on it whose first run is in its model, and kills the
// replica as a crash would (its connection first). It returns the run.
func killedReplica(t *testing.T, e *env, instance string, lease time.Duration) orchestrator.RunInfo {
	t.Helper()
	model, entered := blockingModel()
	b := e.connect(instance)
	o, err := e.sys.Orchestrator(ctxT(t), instance, orchestrator.Config{
		Agent: externalAgent(t, ""), Model: model, InstanceID: instance, LeaseTTL: lease, Clock: stoppedClock(), Bus: b,
		Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	info := startInModel(t, o.Orchestrator, entered)
	b.Conn().Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_ = o.Stop(ctx)
	if indexed(t, e.index(), info.ConversationID) {
		t.Fatal("the killed replica indexed its conversation: the test shows nothing")
	}
	return info
}

// A replica that dies between a conversation's first record and its pause
// leaves it unindexed; another replica finds it from the dead replica's
// watermark once its advert has expired, indexes it and relaunches its
// run when the lease has expired too.
func TestDeadReplicasConversationsAreAdopted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	info := killedReplica(t, e, "dying", 2*time.Second)

	e.worker("calculate_answer")
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), InstanceID: "heir",
		LeaseTTL: 1500 * time.Millisecond, ReconcileInterval: 100 * time.Millisecond})
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || len(c.Runs) != 2 || c.Runs[0].RunID != info.RunID {
		t.Fatalf("status %s (%s), runs %+v; want %s relaunched, then a follow-up", c.Status, c.Error, c.Runs, info.RunID)
	}
	if n := o.Stats().RunsRelaunched.Load(); n != 1 {
		t.Errorf("relaunched %d runs, want 1", n)
	}
	replicas, err := e.connect("replicas").JetStream().KeyValue(ctxT(t), bus.BucketReplicas)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead replica's advert to be deleted", func() (bool, string) {
		_, err := replicas.Get(ctxT(t), "replica.dying")
		return errors.Is(err, jetstream.ErrKeyNotFound), fmt.Sprint(err)
	})
}

// A replica restarted under the same instance id adopts what its earlier
// process left unindexed at once, from the advert it replaces.
func TestRestartedReplicaAdoptsItsOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	info := killedReplica(t, e, "phoenix", 2*time.Second)
	kv := e.index()

	e.worker("calculate_answer")
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), InstanceID: "phoenix",
		LeaseTTL: time.Hour, ReconcileInterval: 100 * time.Millisecond})
	// Its index loop indexes nothing for 20 minutes: the entry is the
	// adoption's.
	waitFor(t, "the conversation to be indexed", func() (bool, string) {
		return indexed(t, kv, info.ConversationID), "not indexed"
	})
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || c.Runs[0].RunID != info.RunID {
		t.Fatalf("status %s (%s), runs %+v", c.Status, c.Error, c.Runs)
	}
}

// A pause on an approval is indexed at once, so that every replica lists
// the pending approval; a conversation still unanswered when its replica
// stops is indexed by the stop.
func TestApprovalsAndStopIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := e.index()
	o, _ := e.orch(orchestrator.Config{Agent: demoAgent(t), Clock: stoppedClock(), InstanceID: "one"})
	c := startPaused(t, o)
	approvals := 0
	for _, p := range c.PendingCalls() {
		if p.Kind == wire.ReplyKindApproval {
			approvals++
		}
	}
	if approvals == 0 {
		t.Fatalf("the seed's batch awaits no approval: %s", describe(c))
	}
	waitFor(t, "the conversation awaiting approval to be indexed", func() (bool, string) {
		return indexed(t, kv, c.ID), "not indexed"
	})
	other, _ := e.orch(orchestrator.Config{Agent: demoAgent(t), InstanceID: "two"})
	pending, err := other.Pending(ctxT(t))
	if err != nil || len(pending) == 0 {
		t.Errorf("another replica lists %d pending calls (%v); want the conversation's", len(pending), err)
	}

	o2, stop := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), Clock: stoppedClock(), InstanceID: "three"})
	info, err := o2.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	waitPublished(t, o2, info.ConversationID, 1)
	if indexed(t, kv, info.ConversationID) {
		t.Fatal("a paused conversation awaiting a worker was indexed at once")
	}
	p, err := o2.Pending(ctxT(t))
	mine := 0
	for _, call := range p {
		if call.ConversationID == info.ConversationID {
			mine++
		}
	}
	if err != nil || mine != 1 {
		t.Errorf("its replica lists %d pending calls of it (%v); want 1", mine, err)
	}
	stop()
	if !indexed(t, kv, info.ConversationID) {
		t.Error("a paused conversation was not indexed when its replica stopped")
	}
}

// A reconcile pass that lists a restarted conversation's new entry and
// reads its log before the record of the restart is stored takes it for
// finished and removes the entry. The restart indexes it once more after
// its record, so the run stays where every replica's reconcile finds it.
func TestRestartIndexedThoughAPassPurgedItsEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Answered with text first (completed), then with an external call no
	// worker takes: the restarted run pauses and stays paused.
	cfg := scriptedExternalAgent(t, `
- text: Hello.
- calls:
    - tool: calculate_answer
      args: {question: again}
- text: Done.
`)
	o, _ := e.orch(orchestrator.Config{Agent: cfg, Clock: stoppedClock()})
	c := completeRun(t, o, "Hi")
	kv := e.index()

	var purged, calls int
	o.OnRestartIndexed(func(id string) {
		if id != c.ID {
			return
		}
		calls++
		if err := o.Reconcile(ctxT(t)); err != nil {
			t.Errorf("reconcile: %v", err)
		}
		if !indexed(t, kv, c.ID) {
			purged++
		}
	})
	if _, err := o.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: "Again", ConversationID: c.ID}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, o, c.ID, conversation.StatusPaused)
	o.OnRestartIndexed(nil)
	if calls != 1 || purged != 1 {
		t.Fatalf("the pass ran %d times between the entry and the record and removed it %d times; want 1 and 1", calls, purged)
	}
	if !indexed(t, kv, c.ID) {
		t.Fatal("the restarted conversation is not in the due index")
	}
	if err := o.Reconcile(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if !indexed(t, kv, c.ID) {
		t.Fatal("a pass over the paused conversation removed its entry")
	}
}
