package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// replyHeaders collects the headers of every call reply, by tool_call_id.
func (e *env) replyHeaders(t *testing.T) func(id string) nats.Header {
	t.Helper()
	var mu sync.Mutex
	got := map[string]nats.Header{}
	sub, err := e.bus.ConsumeReplies(t.Context(), "headers", bus.ConsumeConfig{}, bus.HandlerFunc[bus.Reply](
		func(_ context.Context, d *bus.Delivery[bus.Reply]) error {
			mu.Lock()
			got[d.Msg.ToolCallID()] = d.Header
			mu.Unlock()
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
	return func(id string) nats.Header {
		t.Helper()
		var h nats.Header
		bustest.WaitFor(t, "the reply to "+id, func() bool {
			mu.Lock()
			defer mu.Unlock()
			h = got[id]
			return h != nil
		})
		return h
	}
}

// A call that fails once on infrastructure and then succeeds: the metrics
// count both attempts and the redelivery, each attempt is a span under the
// trace context put on the request, and the reply carries the context of
// the attempt that produced it.
func TestWorkerMetricsAndTrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	headers := e.replyHeaders(t)
	tp, exp := telemetrytest.Tracer(t)
	reg := prometheus.NewRegistry()

	var attempts atomic.Int32
	flaky := worker.ExecutorFunc(func(context.Context, wire.CallRequest) (wire.CallReply, error) {
		if attempts.Add(1) == 1 {
			return wire.CallReply{}, errors.New("webhook down")
		}
		return worker.ReturnValue(json.RawMessage(`"ok"`)), nil
	})
	run(t, newWorker(t, worker.Config{
		Bus:            e.bus,
		Tools:          []worker.Tool{{Spec: worker.ToolSpec{Name: "flaky"}, Executor: flaky}},
		BackOff:        []time.Duration{20 * time.Millisecond},
		Metrics:        telemetry.NewWorkerMetrics(reg),
		TracerProvider: tp,
	}))

	// The orchestrator's side: a run span whose context rides on the call.
	ctx, runSpan := telemetry.Tracer(tp).Start(t.Context(), "run")
	hdr := nats.Header{}
	telemetry.Inject(ctx, hdr)
	runSpan.End()
	if _, err := e.bus.PublishCall(t.Context(), call("flaky", "c1", `{}`), hdr); err != nil {
		t.Fatal(err)
	}
	replyHdr := headers("c1")

	// Spans end, and metrics are recorded, just after the reply is acked.
	var process []sdktrace.ReadOnlySpan
	bustest.WaitFor(t, "two call spans", func() bool {
		process = process[:0]
		for _, s := range exp.GetSpans().Snapshots() {
			if s.Name() == "process toolgate.call.flaky" {
				process = append(process, s)
			}
		}
		return len(process) == 2
	})
	want := runSpan.SpanContext()
	outcomes := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range process {
		if s.SpanContext().TraceID() != want.TraceID() || s.Parent().SpanID() != want.SpanID() {
			t.Errorf("span %s: trace %s parent %s, want trace %s parent %s", s.Name(),
				s.SpanContext().TraceID(), s.Parent().SpanID(), want.TraceID(), want.SpanID())
		}
		if got := telemetrytest.Attr(s, telemetry.AttrToolCallID); got != "c1" {
			t.Errorf("span tool_call_id = %q", got)
		}
		outcomes[telemetrytest.Attr(s, telemetry.AttrOutcome)] = s
	}
	ok := outcomes[telemetry.CallOutcomeReturn]
	if ok == nil || outcomes[telemetry.CallOutcomeError] == nil {
		t.Fatalf("span outcomes %v, want error and return", outcomes)
	}
	if got := telemetrytest.Attr(ok, telemetry.AttrDelivered); got != "2" {
		t.Errorf("successful attempt delivery count %q, want 2", got)
	}
	rsc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), replyHdr))
	if rsc.TraceID() != want.TraceID() || rsc.SpanID() != ok.SpanContext().SpanID() {
		t.Errorf("reply trace context %s/%s, want the successful attempt's %s/%s",
			rsc.TraceID(), rsc.SpanID(), want.TraceID(), ok.SpanContext().SpanID())
	}

	var fams telemetrytest.Families
	bustest.WaitFor(t, "both calls counted", func() bool {
		fams = telemetrytest.Scrape(t, telemetry.Handler(reg))
		n, _ := fams.Value("toolgate_tool_calls_total", "tool", "flaky", "outcome", "return")
		return n == 1
	})
	for _, s := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"toolgate_tool_calls_total", []string{"tool", "flaky", "outcome", "error"}, 1},
		{"toolgate_tool_calls_total", []string{"tool", "flaky", "outcome", "return"}, 1},
		{"toolgate_tool_call_seconds", []string{"tool", "flaky"}, 2},
		{"toolgate_tool_calls_in_flight", []string{"tool", "flaky"}, 0},
		{"toolgate_redeliveries_total", []string{"component", "worker", "tool", "flaky"}, 1},
	} {
		if got, found := fams.Value(s.name, s.labels...); !found || got != s.want {
			t.Errorf("%s%v = %v (found %v), want %v", s.name, s.labels, got, found, s.want)
		}
	}
}

// Without a tracer provider the worker still hands the request's trace
// context on to the reply.
func TestWorkerPassesTraceContextThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	headers := e.replyHeaders(t)
	run(t, newWorker(t, worker.Config{Bus: e.bus, Tools: builtinTools(t)}))
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	hdr := nats.Header{wire.HeaderTraceParent: {tp}}
	if _, err := e.bus.PublishCall(t.Context(), call(worker.ToolNoop, "c1", `{}`), hdr); err != nil {
		t.Fatal(err)
	}
	h := headers("c1")
	if got := h.Get(wire.HeaderTraceParent); got != tp {
		t.Errorf("reply traceparent %q, want %q", got, tp)
	}
	// The id docs/protocol.md gives a result: <run_id>/<tool_call_id>/result.
	if got := h.Get(wire.HeaderMsgID); got != "run1/c1/result" {
		t.Errorf("reply Nats-Msg-Id %q, want run1/c1/result", got)
	}
}
