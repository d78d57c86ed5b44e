package telemetry_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
)

// A span context injected into NATS headers on one side is the parent of
// the span started from the extracted context on the other.
func TestInjectExtractAcrossHeaders(t *testing.T) {
	t.Parallel()
	tp, exp := telemetrytest.Tracer(t)
	tracer := telemetry.Tracer(tp)

	ctx, publish := tracer.Start(t.Context(), "publish")
	h := nats.Header{}
	telemetry.Inject(ctx, h)
	publish.End()
	if h.Get(telemetry.HeaderTraceParent) == "" {
		t.Fatalf("no %s header after Inject: %v", telemetry.HeaderTraceParent, h)
	}

	// The other side: a fresh context, only the headers in common.
	rctx := telemetry.Extract(context.Background(), h)
	rsc := trace.SpanContextFromContext(rctx)
	if !rsc.IsRemote() {
		t.Error("extracted span context is not marked remote")
	}
	_, consume := telemetry.StartConsumer(context.Background(), tracer, "consume", "toolgate.call.weather", h)
	consume.End()

	spans := exp.GetSpans()
	pub, ok1 := telemetrytest.SpanNamed(spans, "publish")
	con, ok2 := telemetrytest.SpanNamed(spans, "consume")
	if !ok1 || !ok2 {
		t.Fatalf("spans: %s", telemetrytest.SpanNames(spans))
	}
	if con.SpanContext.TraceID() != pub.SpanContext.TraceID() {
		t.Errorf("consumer trace id %s, want the publisher's %s", con.SpanContext.TraceID(), pub.SpanContext.TraceID())
	}
	if con.Parent.SpanID() != pub.SpanContext.SpanID() {
		t.Errorf("consumer parent %s, want the publisher span %s", con.Parent.SpanID(), pub.SpanContext.SpanID())
	}
	if !con.Parent.IsRemote() {
		t.Error("consumer parent is not remote")
	}
	if con.SpanKind != trace.SpanKindConsumer {
		t.Errorf("consumer span kind %v", con.SpanKind)
	}
}

func TestExtract(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tests := []struct {
		name      string
		header    nats.Header
		wantTrace string // "" for no valid span context
	}{
		{"lower case", nats.Header{"traceparent": {tp}}, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"canonical case", nats.Header{"Traceparent": {tp}}, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"none", nats.Header{"Toolgate-Run": {"r1"}}, ""},
		{"nil header", nil, ""},
		{"malformed", nats.Header{"traceparent": {"00-zz-00f067aa0ba902b7-01"}}, ""},
		{"all-zero trace id", nats.Header{"traceparent": {"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), tt.header))
			got := ""
			if sc.IsValid() {
				got = sc.TraceID().String()
			}
			if got != tt.wantTrace {
				t.Errorf("trace id %q, want %q", got, tt.wantTrace)
			}
		})
	}
}

// With tracing off (a no-op provider) the trace context still passes from
// the request to the reply unchanged.
func TestPassThroughWhenTracingOff(t *testing.T) {
	t.Parallel()
	in := nats.Header{
		"traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		"tracestate":  {"vendor=x"},
	}
	tracer := noop.NewTracerProvider().Tracer("t")
	ctx, span := telemetry.StartConsumer(context.Background(), tracer, "consume", "toolgate.call.weather", in)
	defer span.End()
	out := nats.Header{}
	telemetry.Inject(ctx, out)
	if diff := cmp.Diff(in, out); diff != "" {
		t.Errorf("headers after pass-through (-in +out):\n%s", diff)
	}
}

func TestInjectMapRoundTrip(t *testing.T) {
	t.Parallel()
	tp, _ := telemetrytest.Tracer(t)
	ctx, span := telemetry.Tracer(tp).Start(t.Context(), "run")
	defer span.End()
	m := telemetry.InjectMap(ctx)
	if m[telemetry.HeaderTraceParent] == "" {
		t.Fatalf("InjectMap = %v, want a traceparent", m)
	}
	back := trace.SpanContextFromContext(telemetry.ExtractMap(context.Background(), m))
	if back.TraceID() != span.SpanContext().TraceID() || back.SpanID() != span.SpanContext().SpanID() {
		t.Errorf("restored %v, want %v", back, span.SpanContext())
	}
	if got := telemetry.InjectMap(context.Background()); got != nil {
		t.Errorf("InjectMap without a span = %v, want nil", got)
	}
	if ctx := telemetry.ExtractMap(context.Background(), nil); trace.SpanContextFromContext(ctx).IsValid() {
		t.Error("ExtractMap(nil) made a span context")
	}
}

func TestHeaderCarrier(t *testing.T) {
	t.Parallel()
	h := nats.Header{"A": {"1", "2"}}
	c := telemetry.HeaderCarrier(h)
	c.Set("b", "3")
	if got := c.Get("a"); got != "1" {
		t.Errorf("Get(a) = %q, want 1 (case-insensitive fallback)", got)
	}
	if got := h.Get("b"); got != "3" {
		t.Errorf("Set did not write through to the nats.Header: %v", h)
	}
	keys := c.Keys()
	if len(keys) != 2 {
		t.Errorf("Keys = %v", keys)
	}
}
