package telemetry_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
)

// The path of a conversation across a pause, each hop through NATS headers
// or stored state only: run 1 publishes a call, a worker answers it, the
// orchestrator consumes the reply and stores its context, and the
// follow-up run started from that stored context is in the same trace.
func TestOneTraceAcrossThePause(t *testing.T) {
	t.Parallel()
	tp, exp := telemetrytest.Tracer(t)
	tracer := telemetry.Tracer(tp)

	// Run 1 pauses; its context is stored with the batch and put on the call.
	ctx1, run1 := telemetry.StartRun(context.Background(), tracer, "run", nil, nil)
	batchTrace := telemetry.InjectMap(ctx1)
	run1.End()
	callHdr := telemetry.HeaderOf(batchTrace)

	// The worker, in another process.
	wctx, work := telemetry.StartConsumer(context.Background(), tracer, "process toolgate.call.weather", "toolgate.call.weather", callHdr)
	replyHdr := nats.Header{}
	telemetry.Inject(wctx, replyHdr)
	work.End()

	// The orchestrator consumes the reply and stores its context with it.
	rctx, reply := telemetry.StartConsumer(context.Background(), tracer, "process toolgate.reply.r1.call", "toolgate.reply.r1.call", replyHdr)
	replyTrace := telemetry.InjectMap(rctx)
	reply.End()

	// Later, perhaps in another replica: the follow-up.
	_, run2 := telemetry.StartRun(context.Background(), tracer, "run", replyTrace, []map[string]string{batchTrace})
	run2.End()

	spans := exp.GetSpans()
	if len(spans) != 4 {
		t.Fatalf("spans: %s", telemetrytest.SpanNames(spans))
	}
	traceID := spans[0].SpanContext.TraceID()
	for i, s := range spans {
		if s.SpanContext.TraceID() != traceID {
			t.Errorf("span %d (%s) is in trace %s, want %s", i, s.Name, s.SpanContext.TraceID(), traceID)
		}
	}
	chain := []struct{ child, parent int }{{1, 0}, {2, 1}, {3, 2}}
	for _, c := range chain {
		if spans[c.child].Parent.SpanID() != spans[c.parent].SpanContext.SpanID() {
			t.Errorf("%s's parent is %s, want %s", spans[c.child].Name, spans[c.child].Parent.SpanID(), spans[c.parent].SpanContext.SpanID())
		}
	}
	if l := spans[3].Links; len(l) != 1 || l[0].SpanContext.SpanID() != spans[0].SpanContext.SpanID() {
		t.Errorf("follow-up links %v, want the paused run", l)
	}
}

// A run with no stored parent starts a new trace even when its context
// already holds a span (the HTTP request's, say).
func TestStartRunWithoutParentIsARoot(t *testing.T) {
	t.Parallel()
	tp, exp := telemetrytest.Tracer(t)
	tracer := telemetry.Tracer(tp)
	ctx, outer := tracer.Start(context.Background(), "http")
	_, run := telemetry.StartRun(ctx, tracer, "run", nil, []map[string]string{nil, {"traceparent": "junk"}})
	run.End()
	outer.End()
	s, _ := telemetrytest.SpanNamed(exp.GetSpans(), "run")
	if s.Parent.IsValid() || s.SpanContext.TraceID() == outer.SpanContext().TraceID() {
		t.Errorf("run span parent %v trace %s: want a new root", s.Parent, s.SpanContext.TraceID())
	}
	if len(s.Links) != 0 {
		t.Errorf("invalid link contexts were kept: %v", s.Links)
	}
	if trace.SpanContextFromContext(telemetry.ExtractMap(context.Background(), telemetry.InjectMap(ctx))).SpanID() != outer.SpanContext().SpanID() {
		t.Error("InjectMap/ExtractMap lost the span")
	}
}
