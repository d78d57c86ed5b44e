package worker_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// A call delivered to a worker and withdrawn by the orchestrator before it
// runs (here: it waits for the worker's one slot, taken by a slow call, and
// no cancel notice comes) is looked up before it runs, found gone and
// skipped: its executor is never invoked, no reply is sent, and it is
// counted as withdrawn. Before, it ran once the slot was free.
func TestWithdrawnCallIsNotRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	entered, release := make(chan struct{}, 1), make(chan struct{})
	slow := worker.ExecutorFunc(func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return wire.CallReply{}, ctx.Err()
		}
		return worker.ReturnValue([]byte(`"slow"`)), nil
	})
	var ran atomic.Int64
	other := worker.ExecutorFunc(func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
		ran.Add(1)
		return worker.ReturnValue([]byte(`"other"`)), nil
	})
	reg := prometheus.NewRegistry()
	w := newWorker(t, worker.Config{Bus: bustest.Connect(t, e.srv, "worker"), ID: "w1", Concurrency: 1, Metrics: telemetry.NewWorkerMetrics(reg), Tools: []worker.Tool{
		{Spec: worker.ToolSpec{Name: "slow"}, Executor: slow},
		{Spec: worker.ToolSpec{Name: "other"}, Executor: other},
	}})
	replies := e.replies(t)
	run(t, w)

	e.publish(t, call("slow", "s1", `{}`))
	bustest.Recv(t, entered, "the slow call at the worker")
	e.publish(t, call("other", "o1", `{}`))
	cons, err := e.bus.JetStream().Consumer(t.Context(), wire.StreamCalls, "call_other")
	if err != nil {
		t.Fatal(err)
	}
	bustest.WaitFor(t, "the other call delivered, waiting for the slot", func() bool {
		ci, err := cons.Info(t.Context())
		return err == nil && ci.NumAckPending == 1
	})
	n, err := e.bus.WithdrawCalls(t.Context(), "other", "run1", []string{"o1"})
	if err != nil || n != 1 {
		t.Fatalf("withdraw: %d, %v; want 1 withdrawn", n, err)
	}
	close(release)

	bustest.WaitFor(t, "the withdrawn call counted", func() bool {
		v, _ := telemetrytest.Scrape(t, telemetry.Handler(reg)).Value("toolgate_tool_calls_total", "tool", "other", "outcome", "withdrawn")
		return v == 1
	})
	if got := replies.wait(t, 1); len(got) != 1 || got[0].ToolCallID != "s1" {
		t.Errorf("replies %+v, want the slow call's only", got)
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the withdrawn call ran %d times", n)
	}
	if n := bustest.StreamMsgs(t, e.bus, wire.StreamCalls); n != 0 {
		t.Errorf("%d calls left in the stream", n)
	}
}
