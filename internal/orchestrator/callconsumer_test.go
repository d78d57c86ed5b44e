package orchestrator_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// The orchestrator, not a tool-worker, creates call_<tool>: a worker in
// another language that only binds to it and keeps failing the call sees
// the call settled "exhausted 5 deliveries", and the run goes on.
func TestForeignWorkerBindsToTheOrchestratorsCallConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, "")})
	info, err := o.StartRun(ctxT(t), "Calculate the answer to the ultimate question of life, the universe, and everything", "")
	if err != nil {
		t.Fatal(err)
	}
	waitPublished(t, o, info.ConversationID, 1)

	// No tool-worker ran: the consumer is the orchestrator's.
	js := e.connect("foreign").JetStream()
	cons, err := js.Consumer(ctxT(t), wire.StreamCalls, "call_calculate_answer")
	if err != nil {
		t.Fatalf("bind to call_calculate_answer: %v", err)
	}
	if cfg := cons.CachedInfo().Config; cfg.MaxDeliver != 5 || cfg.FilterSubject != "toolgate.call.calculate_answer" {
		t.Errorf("call_calculate_answer: max_deliver %d, filter %q", cfg.MaxDeliver, cfg.FilterSubject)
	}
	var deliveries atomic.Int64
	cc, err := cons.Consume(func(m jetstream.Msg) {
		deliveries.Add(1)
		_ = m.Nak()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)

	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	var failed string
	for _, m := range c.History {
		for _, p := range m.Parts {
			if p.Kind == "tool-return" && p.Outcome == "failed" {
				failed = p.Content + string(p.Value)
			}
		}
	}
	if !strings.Contains(failed, "exhausted 5 deliveries") {
		t.Errorf("the call's result %q, want failed \"exhausted 5 deliveries\"; %s", failed, describe(c))
	}
	if n := deliveries.Load(); n != 5 {
		t.Errorf("%d deliveries, want 5", n)
	}
}
