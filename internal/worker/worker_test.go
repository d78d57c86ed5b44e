package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// env is an embedded server with toolgate's streams, for one test.
type env struct {
	srv *embedded.Server
	bus *bus.Bus
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := bustest.StartServer(t, embedded.ServerConfig{NoListen: true})
	e := &env{srv: srv, bus: bustest.Connect(t, srv, "test")}
	bustest.Setup(t, e.bus)
	return e
}

// replies collects every call reply published, keyed by tool_call_id, in
// the order they were stored.
type replies struct {
	mu   sync.Mutex
	got  []wire.CallReply
	more chan struct{}
}

func (e *env) replies(t *testing.T) *replies {
	t.Helper()
	r := &replies{more: make(chan struct{}, 1)}
	sub, err := e.bus.ConsumeReplies(t.Context(), "test", bus.ConsumeConfig{}, bus.HandlerFunc[bus.Reply](
		func(_ context.Context, d *bus.Delivery[bus.Reply]) error {
			if d.Msg.Call == nil {
				return nil
			}
			r.mu.Lock()
			r.got = append(r.got, *d.Msg.Call)
			r.mu.Unlock()
			select {
			case r.more <- struct{}{}:
			default:
			}
			return nil
		}))
	if err != nil {
		t.Fatalf("consume replies: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sub.Stop(ctx)
	})
	return r
}

// wait returns the replies once there are at least n, or fails the test.
func (r *replies) wait(t *testing.T, n int) []wire.CallReply {
	t.Helper()
	timeout := time.NewTimer(20 * time.Second)
	defer timeout.Stop()
	for {
		r.mu.Lock()
		got := append([]wire.CallReply(nil), r.got...)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-r.more:
		case <-timeout.C:
			t.Fatalf("got %d replies, want %d: %+v", len(got), n, got)
		}
	}
}

func (e *env) publish(t *testing.T, req wire.CallRequest) {
	t.Helper()
	if _, err := e.bus.PublishCall(t.Context(), req); err != nil {
		t.Fatalf("publish call: %v", err)
	}
}

func newWorker(t *testing.T, cfg worker.Config) *worker.Worker {
	t.Helper()
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// run starts w and returns a function that stops it and returns Run's error.
func run(t *testing.T, w *worker.Worker) (stop func() error) {
	t.Helper()
	return bustest.Run(t, "worker", w.Run)
}

func call(tool, id, args string) wire.CallRequest {
	return wire.CallRequest{
		RunID:          "run1",
		ConversationID: "conv1",
		ToolCallID:     id,
		ToolName:       tool,
		Args:           json.RawMessage(args),
		Deadline:       time.Now().Add(time.Minute),
	}
}

func builtinTools(t *testing.T) []worker.Tool {
	t.Helper()
	b, err := worker.NewBuiltin(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var tools []worker.Tool
	for _, s := range worker.BuiltinTools() {
		tools = append(tools, worker.Tool{Spec: s, Executor: b, Kind: "builtin"})
	}
	return tools
}

func TestWorkerReplies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got := e.replies(t)
	var ranLate atomic.Int32
	tools := append(builtinTools(t), worker.Tool{
		Spec: worker.ToolSpec{Name: "late"},
		Executor: worker.ExecutorFunc(func(context.Context, wire.CallRequest) (wire.CallReply, error) {
			ranLate.Add(1)
			return worker.ReturnValue(json.RawMessage(`"ran"`)), nil
		}),
	})
	run(t, newWorker(t, worker.Config{Bus: e.bus, Tools: tools, ID: "w1"}))

	e.publish(t, call("update_file", "c1", `{"path":"README.md","content":"Hello, world!"}`))
	e.publish(t, call("calculate_answer", "c2", `{"question":"everything"}`))
	e.publish(t, call("delete_file", "c3", `{"path":"../../etc/passwd"}`))
	e.publish(t, call("update_file", "c4", `{"path":"x"}`))
	expired := call("late", "c5", `{}`)
	expired.Deadline = time.Now().Add(-time.Second)
	e.publish(t, expired)

	byID := map[string]wire.CallReply{}
	for _, r := range got.wait(t, 5) {
		byID[r.ToolCallID] = r
	}
	want := map[string]wire.CallReply{
		"c1": {RunID: "run1", ToolCallID: "c1", Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"File 'README.md' updated: 'Hello, world!'"`), WorkerID: "w1"},
		"c2": {RunID: "run1", ToolCallID: "c2", Outcome: wire.OutcomeReturn, Value: json.RawMessage(`42`), WorkerID: "w1"},
		"c3": {RunID: "run1", ToolCallID: "c3", Outcome: wire.OutcomeFailed, Message: "path '../../etc/passwd' is outside the sandbox", WorkerID: "w1"},
		"c4": {RunID: "run1", ToolCallID: "c4", Outcome: wire.OutcomeRetry, Message: "invalid arguments: missing content", WorkerID: "w1"},
		"c5": {RunID: "run1", ToolCallID: "c5", Outcome: wire.OutcomeFailed, Message: "timed out", WorkerID: "w1"},
	}
	if diff := cmp.Diff(want, byID); diff != "" {
		t.Errorf("replies (-want +got):\n%s", diff)
	}
	if n := ranLate.Load(); n != 0 {
		t.Errorf("a call past its deadline ran %d times, want 0", n)
	}
}

// A result over wire.MaxReplyBytes, which the orchestrator would refuse, is
// sent as a failed result saying so (the model sees it at once, instead of
// a "timed out" at the call's deadline); one at the limit goes as it is.
func TestWorkerFailsResultTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got := e.replies(t)
	sized := worker.ExecutorFunc(func(_ context.Context, req wire.CallRequest) (wire.CallReply, error) {
		var args struct{ Bytes int }
		if err := json.Unmarshal(req.Args, &args); err != nil {
			return wire.CallReply{}, err
		}
		return worker.ReturnValue(json.RawMessage(`"` + strings.Repeat("x", args.Bytes-2) + `"`)), nil
	})
	warned := newLogSignal("result too large")
	run(t, newWorker(t, worker.Config{Bus: e.bus, ID: "w1", Tools: []worker.Tool{{Spec: worker.ToolSpec{Name: "sized"}, Executor: sized}},
		Logger: warned.logger()}))
	e.publish(t, call("sized", "over", fmt.Sprintf(`{"bytes":%d}`, wire.MaxReplyBytes+1)))
	e.publish(t, call("sized", "at", fmt.Sprintf(`{"bytes":%d}`, wire.MaxReplyBytes)))
	byID := map[string]wire.CallReply{}
	for _, r := range got.wait(t, 2) {
		byID[r.ToolCallID] = r
	}
	over := byID["over"]
	if want := fmt.Sprintf("result too large: %d bytes, limit %d", wire.MaxReplyBytes+1, wire.MaxReplyBytes); over.Outcome != wire.OutcomeFailed || over.Message != want || over.Value != nil {
		t.Errorf("over the limit: %s %q (%d bytes of value), want failed %q", over.Outcome, over.Message, len(over.Value), want)
	}
	if at := byID["at"]; at.Outcome != wire.OutcomeReturn || len(at.Value) != wire.MaxReplyBytes {
		t.Errorf("at the limit: %s %q (%d bytes of value)", at.Outcome, at.Message, len(at.Value))
	}
	select {
	case <-warned.seen:
	default:
		t.Error("no warning logged before the failed result was sent")
	}
}

func TestWorkerRetriesInfrastructureErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got := e.replies(t)
	var attempts atomic.Int32
	flaky := worker.ExecutorFunc(func(context.Context, wire.CallRequest) (wire.CallReply, error) {
		if attempts.Add(1) == 1 {
			return wire.CallReply{}, errors.New("webhook down")
		}
		return worker.ReturnValue(json.RawMessage(`"second time lucky"`)), nil
	})
	run(t, newWorker(t, worker.Config{
		Bus:     e.bus,
		Tools:   []worker.Tool{{Spec: worker.ToolSpec{Name: "flaky"}, Executor: flaky}},
		BackOff: []time.Duration{20 * time.Millisecond},
	}))
	e.publish(t, call("flaky", "c1", `{}`))
	r := got.wait(t, 1)
	if r[0].Outcome != wire.OutcomeReturn || string(r[0].Value) != `"second time lucky"` {
		t.Errorf("reply = %+v, want the second attempt's value", r[0])
	}
	if n := attempts.Load(); n != 2 {
		t.Errorf("executor ran %d times, want 2", n)
	}
}

func TestWorkersShareTheQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got := e.replies(t)

	var (
		mu       sync.Mutex
		runs     = map[string]int{}
		inFlight = map[string]bool{} // worker ids running a call now
		both     = make(chan struct{})
		bothOnce sync.Once
	)
	exec := func(id string) worker.Executor {
		return worker.ExecutorFunc(func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
			mu.Lock()
			runs[req.ToolCallID]++
			inFlight[id] = true
			if len(inFlight) == 2 {
				bothOnce.Do(func() { close(both) })
			}
			mu.Unlock()
			// The first calls wait until each worker holds one: proof that
			// the second worker takes calls while the first is busy.
			select {
			case <-both:
			case <-ctx.Done():
				return wire.CallReply{}, ctx.Err()
			}
			mu.Lock()
			delete(inFlight, id)
			mu.Unlock()
			return worker.ReturnValue(json.RawMessage(`"done"`)), nil
		})
	}
	for _, id := range []string{"w1", "w2"} {
		run(t, newWorker(t, worker.Config{
			Bus:         bustest.Connect(t, e.srv, "test"),
			Tools:       []worker.Tool{{Spec: worker.ToolSpec{Name: "job"}, Executor: exec(id)}},
			ID:          id,
			Concurrency: 1,
		}))
	}
	const n = 40
	for i := range n {
		e.publish(t, call("job", fmt.Sprintf("c%d", i), `{}`))
	}
	replies := got.wait(t, n)
	workers := map[string]int{}
	seen := map[string]bool{}
	for _, r := range replies {
		if seen[r.ToolCallID] {
			t.Errorf("call %s answered twice", r.ToolCallID)
		}
		seen[r.ToolCallID] = true
		workers[r.WorkerID]++
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if id := fmt.Sprintf("c%d", i); runs[id] != 1 {
			t.Errorf("call %s ran %d times, want 1", id, runs[id])
		}
	}
	if workers["w1"] == 0 || workers["w2"] == 0 {
		t.Errorf("replies by worker = %v, want both workers to take part", workers)
	}
}

func TestWorkerInProgressKeepsLongCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got := e.replies(t)
	var runs atomic.Int32
	slow := worker.ExecutorFunc(func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
		runs.Add(1)
		select {
		case <-time.After(3 * time.Second): // three times AckWait
		case <-ctx.Done():
			return wire.CallReply{}, ctx.Err()
		}
		return worker.ReturnValue(json.RawMessage(`"slow but sure"`)), nil
	})
	run(t, newWorker(t, worker.Config{
		Bus:         e.bus,
		Tools:       []worker.Tool{{Spec: worker.ToolSpec{Name: "slow"}, Executor: slow}},
		AckWait:     time.Second,
		Concurrency: 2, // a redelivery would find a free loop
	}))
	e.publish(t, call("slow", "c1", `{}`))
	r := got.wait(t, 1)
	if r[0].Outcome != wire.OutcomeReturn {
		t.Errorf("reply = %+v", r[0])
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("long call ran %d times, want 1: it was redelivered despite in-progress acks", n)
	}
}

func TestWorkerConcurrencyIsSharedAcrossTools(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got := e.replies(t)
	var active, peak atomic.Int32
	release := make(chan struct{})
	block := worker.ExecutorFunc(func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
		n := active.Add(1)
		defer active.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		select {
		case <-release:
		case <-ctx.Done():
			return wire.CallReply{}, ctx.Err()
		}
		return worker.ReturnValue(json.RawMessage(`1`)), nil
	})
	run(t, newWorker(t, worker.Config{
		Bus: e.bus,
		Tools: []worker.Tool{
			{Spec: worker.ToolSpec{Name: "a"}, Executor: block},
			{Spec: worker.ToolSpec{Name: "b"}, Executor: block},
		},
		Concurrency: 2,
	}))
	for i := range 3 {
		e.publish(t, call("a", fmt.Sprintf("a%d", i), `{}`))
		e.publish(t, call("b", fmt.Sprintf("b%d", i), `{}`))
	}
	// Two loops per tool: four calls delivered, two running, two waiting.
	bustest.WaitFor(t, "four calls delivered", func() bool {
		return ackPending(t, e, "a")+ackPending(t, e, "b") == 4
	})
	bustest.WaitFor(t, "two calls running", func() bool { return active.Load() == 2 })
	close(release)
	got.wait(t, 6)
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrency = %d, want 2", p)
	}
}

func ackPending(t *testing.T, e *env, tool string) int {
	t.Helper()
	name, _ := wire.CallConsumerName(tool)
	c, err := e.bus.JetStream().Consumer(t.Context(), wire.StreamCalls, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0 // the worker has not created it yet
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.NumAckPending
}

func TestWorkerDrainFinishesCallsInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got := e.replies(t)
	started := make(chan struct{})
	release := make(chan struct{})
	exec := worker.ExecutorFunc(func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
			return wire.CallReply{}, ctx.Err()
		}
		return worker.ReturnValue(json.RawMessage(`"finished during drain"`)), nil
	})
	// A call that reaches the stopping worker's pull just before it stops
	// comes back at the latest after AckWait; keep that short so the test
	// does not depend on which side of the stop c2 lands.
	stop := run(t, newWorker(t, worker.Config{
		Bus:     e.bus,
		AckWait: 3 * time.Second,
		Tools:   []worker.Tool{{Spec: worker.ToolSpec{Name: "job"}, Executor: exec}},
	}))
	e.publish(t, call("job", "c1", `{}`))
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// Run must still be waiting for the call: stopping fetches nothing new.
	e.publish(t, call("job", "c2", `{}`))
	select {
	case err := <-stopped:
		t.Fatalf("Run returned %v while a call was in flight", err)
	default:
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	r := got.wait(t, 1)
	if r[0].ToolCallID != "c1" || string(r[0].Value) != `"finished during drain"` {
		t.Errorf("reply = %+v, want c1's result", r[0])
	}

	// c2 was published during the drain; it waits in the queue for the
	// next worker. That worker keeps the short AckWait: its consumer
	// config applies to the durable, so a longer one would also delay c2's
	// redelivery if the stopping worker's pull caught it.
	var ran sync.Map
	run(t, newWorker(t, worker.Config{
		Bus:     e.bus,
		AckWait: 3 * time.Second,
		Tools: []worker.Tool{{Spec: worker.ToolSpec{Name: "job"}, Executor: worker.ExecutorFunc(
			func(_ context.Context, req wire.CallRequest) (wire.CallReply, error) {
				ran.Store(req.ToolCallID, true)
				return worker.ReturnValue(json.RawMessage(`"next worker"`)), nil
			})}},
	}))
	r = got.wait(t, 2)
	if r[1].ToolCallID != "c2" {
		t.Errorf("second reply = %+v, want c2", r[1])
	}
	if _, ok := ran.Load("c1"); ok {
		t.Error("c1 ran again after its reply")
	}
}

func TestWorkerDrainTimeoutHandsCallsBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got := e.replies(t)
	started := make(chan struct{})
	stuck := worker.ExecutorFunc(func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
		close(started)
		<-ctx.Done() // only the drain timeout ends it
		return wire.CallReply{}, ctx.Err()
	})
	stop := run(t, newWorker(t, worker.Config{
		Bus:          e.bus,
		Tools:        []worker.Tool{{Spec: worker.ToolSpec{Name: "job"}, Executor: stuck}},
		DrainTimeout: 200 * time.Millisecond,
		AckWait:      time.Minute, // a redelivery can only come from the nak
		Advertise:    true,
	}))
	// Served before the call comes: a worker stopped while it still starts
	// cancels its calls without a drain (they are handed back all the same).
	bustest.Advertised(t, e.bus, "job")
	e.publish(t, call("job", "c1", `{}`))
	<-started
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	var delivered atomic.Int32
	w2, err := worker.New(worker.Config{
		Bus: bustest.Connect(t, e.srv, "test"),
		Tools: []worker.Tool{{Spec: worker.ToolSpec{Name: "job"}, Executor: worker.ExecutorFunc(
			func(context.Context, wire.CallRequest) (wire.CallReply, error) {
				delivered.Add(1)
				return worker.ReturnValue(json.RawMessage(`"redelivered"`)), nil
			})}},
		ID: "w2",
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w2)
	r := got.wait(t, 1)
	if r[0].ToolCallID != "c1" || r[0].WorkerID != "w2" {
		t.Errorf("reply = %+v, want c1 answered by w2", r[0])
	}
	if n := delivered.Load(); n != 1 {
		t.Errorf("w2 ran c1 %d times, want 1", n)
	}
}

func TestWorkerAdvertisesTools(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w, err := worker.New(worker.Config{
		Bus: e.bus, Tools: builtinTools(t), ID: "w1", Advertise: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	var a bus.ToolAdvert
	if err := json.Unmarshal(bustest.Advertised(t, e.bus, "update_file"), &a); err != nil {
		t.Fatal(err)
	}
	if a.Name != "update_file" || a.Kind != "call" || a.Executor != "builtin" || a.WorkerID != "w1" || len(a.Parameters) == 0 {
		t.Errorf("advertisement = %+v", a)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	noop := worker.ExecutorFunc(func(context.Context, wire.CallRequest) (wire.CallReply, error) { return wire.CallReply{}, nil })
	e := newEnv(t)
	tests := []struct {
		name string
		cfg  worker.Config
	}{
		{"no bus", worker.Config{Tools: []worker.Tool{{Spec: worker.ToolSpec{Name: "a"}, Executor: noop}}}},
		{"no tools", worker.Config{Bus: e.bus}},
		{"bad name", worker.Config{Bus: e.bus, Tools: []worker.Tool{{Spec: worker.ToolSpec{Name: "a.b"}, Executor: noop}}}},
		{"twice", worker.Config{Bus: e.bus, Tools: []worker.Tool{{Spec: worker.ToolSpec{Name: "a"}, Executor: noop}, {Spec: worker.ToolSpec{Name: "a"}, Executor: noop}}}},
		{"no executor", worker.Config{Bus: e.bus, Tools: []worker.Tool{{Spec: worker.ToolSpec{Name: "a"}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := worker.New(tt.cfg); err == nil {
				t.Error("New: want an error")
			}
		})
	}
}
