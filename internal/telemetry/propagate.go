package telemetry

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/telemetry/natstrace"
)

// The trace context on NATS headers lives in package natstrace, which
// libraries link without this package's exporters; these names keep it
// where the binaries' code looks for it.

// Header names of the W3C trace context, as they travel in NATS headers
// (wire.HeaderTraceParent is the first).
const (
	HeaderTraceParent = natstrace.HeaderTraceParent
	HeaderTraceState  = natstrace.HeaderTraceState
)

// Span attribute keys. Ids belong on spans, never on metric labels.
const (
	AttrRunID          = natstrace.AttrRunID
	AttrConversationID = natstrace.AttrConversationID
	AttrToolCallID     = natstrace.AttrToolCallID
	AttrTool           = natstrace.AttrTool
	AttrKind           = natstrace.AttrKind
	AttrOutcome        = natstrace.AttrOutcome
	AttrAttempt        = natstrace.AttrAttempt
	AttrDelivered      = natstrace.AttrDelivered
)

// Propagator is the propagator toolgate uses on NATS headers: W3C
// TraceContext (natstrace.Propagator).
func Propagator() propagation.TextMapPropagator { return natstrace.Propagator() }

// HeaderCarrier adapts a nats.Header to propagation.TextMapCarrier
// (natstrace.HeaderCarrier).
type HeaderCarrier = natstrace.HeaderCarrier

// Inject writes the trace context of ctx into h (natstrace.Inject).
func Inject(ctx context.Context, h nats.Header) { natstrace.Inject(ctx, h) }

// Extract returns ctx carrying the remote span context found in h
// (natstrace.Extract).
func Extract(ctx context.Context, h nats.Header) context.Context { return natstrace.Extract(ctx, h) }

// InjectMap returns the trace context of ctx as header name → value
// (natstrace.InjectMap).
func InjectMap(ctx context.Context) map[string]string { return natstrace.InjectMap(ctx) }

// ExtractMap returns ctx carrying the remote span context stored by
// InjectMap (natstrace.ExtractMap).
func ExtractMap(ctx context.Context, m map[string]string) context.Context {
	return natstrace.ExtractMap(ctx, m)
}

// StartConsumer starts a consumer span for a message delivered from
// subject with headers h (natstrace.StartConsumer).
func StartConsumer(ctx context.Context, tracer trace.Tracer, name, subject string, h nats.Header, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return natstrace.StartConsumer(ctx, tracer, name, subject, h, attrs...)
}

// Request names the call or approval request a consumer span is of
// (natstrace.Request).
type Request = natstrace.Request

// StartRequest starts the consumer span of a delivered call or approval
// request (natstrace.StartRequest).
func StartRequest(ctx context.Context, tracer trace.Tracer, subject string, h nats.Header, r Request, extra ...attribute.KeyValue) (context.Context, trace.Span) {
	return natstrace.StartRequest(ctx, tracer, subject, h, r, extra...)
}

// HeaderOf returns a nats.Header holding a trace context stored by
// InjectMap (natstrace.HeaderOf).
func HeaderOf(m map[string]string) nats.Header { return natstrace.HeaderOf(m) }

// StartRun starts the span of one agent run (natstrace.StartRun).
func StartRun(ctx context.Context, tracer trace.Tracer, name string, parent map[string]string, links []map[string]string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return natstrace.StartRun(ctx, tracer, name, parent, links, attrs...)
}
