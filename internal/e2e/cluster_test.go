package e2e_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/wire"
)

// A 3-node cluster with R3 streams and buckets loses nothing when the
// leader of the replies stream is shut down in the middle of a busy load:
// every conversation completes, with exactly one answer per tool call, and
// the clients on the dead node reconnect to the others.
func TestClusterLeaderKilledUnderLoad(t *testing.T) {
	began := time.Now()
	cl := startCluster(t, 3)
	setupRetry(t, cl.connect("setup", bus.ConnConfig{}), bus.SetupConfig{Replicas: 3})
	t.Logf("cluster up and set up in %s", time.Since(began).Round(time.Millisecond))
	sys := testkit.Test(t, testkit.Options{URL: cl.URL(), NoSetup: true, Logger: clLogger(t)})
	for _, stream := range []string{wire.StreamCalls, wire.StreamReplies, bus.StreamConversations} {
		st, err := cl.connect("check", bus.ConnConfig{}).JetStream().Stream(clCtx(t), stream)
		if err != nil {
			t.Fatal(err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("%s has %d replicas, want 3", stream, r)
		}
	}

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	conns := map[string]*bus.Bus{}
	conn := func(name string) *bus.Bus {
		b := cl.connect(name, bus.ConnConfig{})
		conns[name] = b
		return b
	}
	counts := &orchestrator.Counts{}
	o := startOrch(t, sys, orchestrator.Config{
		Bus: conn("orchestrator"), InstanceID: "orch", Observer: counts,
		TrustedApprovers: map[string]ed25519.PublicKey{"bot": pub},
		// Short enough that a run whose result could not be stored while
		// the leader moved is relaunched, and a batch whose completing
		// update lost its answer is found, within the test.
		LeaseTTL: 5 * time.Second, ReconcileInterval: time.Second,
		// A reply delivered to the connection that died is delivered
		// again after this.
		ReplyAckWait: 5 * time.Second,
	})
	// A call or request whose ack was lost with the node is delivered
	// again after AckWait.
	startWorker(t, sys, conn("worker-1"), "worker-1", 8, 5*time.Second)
	startWorker(t, sys, conn("worker-2"), "worker-2", 8, 5*time.Second)
	startApprover(t, sys, conn("bot"), "bot", priv, 5*time.Second)

	// Each conversation of the seed prompt makes two runs, three tool
	// calls and four deferred calls: two approvals (one denied), a call at
	// once and one sent to the workers when it is approved (under the
	// approved call's id and run).
	const n = 60
	// Conversations are started at a steady pace, so that the load is
	// still busy, new runs included, when the leader dies. A start that
	// fails while the cluster elects a new leader is tried again under
	// its idempotency key: an attempt whose write landed but whose answer
	// was lost is answered by the retry, not repeated.
	var (
		mu        sync.Mutex
		ids       []string
		startErrs []string
	)
	started := make(chan struct{})
	go func() {
		defer close(started)
		for i := range n {
			for attempt := 0; ; attempt++ {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				info, err := o.StartRunWith(ctx, orchestrator.StartRequest{Prompt: seedPrompt, IdempotencyKey: fmt.Sprintf("conversation-%d", i)})
				cancel()
				if err == nil {
					mu.Lock()
					ids = append(ids, info.ConversationID)
					mu.Unlock()
					break
				}
				mu.Lock()
				startErrs = append(startErrs, err.Error())
				mu.Unlock()
				if attempt == 5 {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// Kill the replies leader once a few conversations are through.
	clWaitFor(t, "the first replies", func() (bool, string) {
		a := counts.RepliesApplied.Load()
		return a >= 24, fmt.Sprintf("applied %d", a)
	})
	victim := cl.streamLeader(wire.StreamReplies)
	if victim < 0 {
		t.Fatal("no leader for the replies stream")
	}
	meta := cl.metaLeader()
	runsLeader := cl.streamLeader(bus.StreamConversations)
	var onVictim []string
	for name, b := range conns {
		if b.Conn().ConnectedServerName() == cl.names[victim] {
			onVictim = append(onVictim, name)
		}
	}
	// What is in flight, read cheaply so that the load does not run
	// ahead: the calls waiting for a worker, the replies not yet acked by
	// the orchestrator, the replies still to come for the conversations
	// started so far.
	js := conns["orchestrator"].JetStream()
	callsInfo, err := js.Stream(clCtx(t), wire.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	queued := callsInfo.CachedInfo().State.Msgs
	unacked, err := replyConsumersUnacked(t, js)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	startedBefore := len(ids)
	mu.Unlock()
	applied := counts.RepliesApplied.Load()
	killedAt := time.Now()
	cl.kill(victim)
	t.Logf("killed %s (replies leader; meta leader %v, conversations stream leader %v; clients on it: %v): %d of %d conversations started, %d calls queued for workers, %d replies unacked or undelivered, %d of their %d replies still to come",
		cl.names[victim], meta == victim, runsLeader == victim, onVictim, startedBefore, n, queued,
		unacked, 4*int64(startedBefore)-applied, 4*startedBefore)
	if startedBefore == n && applied == 4*n {
		t.Fatal("the load ended before the leader was killed; nothing was tested")
	}
	select {
	case <-started:
	case <-time.After(2 * clWait):
		t.Fatal("conversations still starting")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ids) != n {
		t.Fatalf("started %d of %d conversations; errors: %v", len(ids), n, startErrs)
	}
	if len(startErrs) > 0 {
		t.Logf("%d starts were tried again: %v", len(startErrs), startErrs)
	}

	diag := cl.connect("diagnosis", bus.ConnConfig{}).JetStream()
	for _, id := range ids {
		c := waitTerminal(t, o, id, diag)
		if c.Status != conversation.StatusCompleted {
			t.Errorf("%s: %s: %s", id, c.Status, c.Error)
			continue
		}
		if len(c.Runs) != 2 {
			t.Errorf("%s: %d runs, want 2", id, len(c.Runs))
		}
		returns, calls := returnsPerCall(c)
		if len(calls) != 3 {
			t.Errorf("%s: %d tool calls in the history, want 3: %v", id, len(calls), calls)
		}
		for _, call := range calls {
			if returns[call] != 1 {
				t.Errorf("%s: call %s answered %d times, want once", id, call, returns[call])
			}
		}
		if !strings.Contains(c.Output, "Hello, world!") {
			t.Errorf("%s: output %q", id, c.Output)
		}
	}
	// No start made a conversation twice.
	convStream, err := cl.connect("keys", bus.ConnConfig{}).JetStream().Stream(clCtx(t), bus.StreamConversations)
	if err != nil {
		t.Fatal(err)
	}
	info, err := convStream.Info(clCtx(t), jetstream.WithSubjectFilter(bus.ConversationSubjects))
	if err != nil {
		t.Fatal(err)
	}
	if convs := len(info.State.Subjects); convs != n {
		t.Errorf("%d conversations stored, want %d", convs, n)
	}
	// The counters are this process's view. A write whose answer died
	// with the node may have landed: the reply's redelivery then finds it
	// recorded (a duplicate), and the follow-up that write claimed is
	// relaunched when its lease runs out. So a follow-up is counted either
	// as launched or as relaunched, never twice; the histories checked
	// above are what says that each batch was followed up exactly once.
	// Except for a follow-up run before its claim was stored (tentative)
	// and dropped because that write failed: it is uncounted, though the
	// write may have landed with the run's end in it (the run then needs
	// no relaunch, and is counted nowhere) or with the claim alone (and it
	// is launched again here or relaunched). Each such drop moves the
	// count by one at most.
	st := counts
	dropped := st.TentativeDropped.Load()
	if f, r := st.FollowUps.Load(), st.RunsRelaunched.Load(); f > n+dropped || f+r < n-dropped {
		t.Errorf("follow-ups launched %d and relaunched %d, %d dropped before their claim was stored; want at most %d launched and %d in all, give or take the dropped",
			f, r, dropped, n, n)
	}
	if leader := cl.streamLeader(wire.StreamReplies); leader < 0 || leader == victim {
		t.Errorf("replies stream leader after the kill: %d", leader)
	}
	for _, name := range onVictim {
		if r := conns[name].Conn().Stats().Reconnects; r == 0 {
			t.Errorf("%s was on the killed node and never reconnected", name)
		}
	}
	// Nothing is left behind: no call waits for a worker, no reply for the
	// orchestrator. A call whose ack was lost with the node stays in the
	// work queue until its AckWait passes; it then runs again (at least
	// once) and its second reply is dropped as a duplicate, so the queue
	// drains without a second application (checked above and below).
	js = cl.connect("final", bus.ConnConfig{}).JetStream()
	calls, err := js.Stream(clCtx(t), wire.StreamCalls)
	if err != nil {
		t.Fatal(err)
	}
	clWaitFor(t, "the calls stream drained", func() (bool, string) {
		info, err := calls.Info(clCtx(t))
		if err != nil {
			return false, err.Error()
		}
		return info.State.Msgs == 0, fmt.Sprintf("%d calls left", info.State.Msgs)
	})
	clWaitFor(t, "every reply acked", func() (bool, string) {
		n, err := replyConsumersUnacked(t, js)
		if err != nil {
			return false, err.Error()
		}
		return n == 0, fmt.Sprintf("%d replies pending or unacked", n)
	})
	// The redelivered calls changed nothing: still one applied reply per
	// deferred call (four per conversation).
	if a, d := st.RepliesApplied.Load(), st.Duplicates.Load(); a > int64(4*n) || a+d < int64(4*n) {
		t.Errorf("replies applied %d, duplicates %d after the queues drained; want at most %d applied and %d in all", a, d, 4*n, 4*n)
	}
	t.Logf("load of %d conversations finished %s after the kill; whole test %s; stats: applied %d, duplicates %d, refused %d, transient errors %d, relaunched %d",
		n, time.Since(killedAt).Round(time.Millisecond), time.Since(began).Round(time.Millisecond),
		counts.RepliesApplied.Load(), counts.Duplicates.Load(), counts.Refused.Load(),
		counts.TransientErrors.Load(), counts.RunsRelaunched.Load())
	if r := counts.Refused.Load(); r != 0 {
		t.Errorf("%d replies refused", r)
	}
}

func jsConsumerInfo(t *testing.T, js jetstream.JetStream, stream, consumer string) (*jetstream.ConsumerInfo, error) {
	c, err := js.Consumer(clCtx(t), stream, consumer)
	if err != nil {
		return nil, err
	}
	return c.Info(clCtx(t))
}
