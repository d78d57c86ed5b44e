// Package natstrace carries W3C trace context on NATS headers and starts
// the consumer spans of delivered messages. It depends on the OpenTelemetry
// API only, not on an SDK or an exporter, so that a worker library links it
// and leaves the choice of exporter to its main (package telemetry wires
// one for toolgate's binaries).
package natstrace

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names toolgate's tracers.
const InstrumentationName = "github.com/toolgate/toolgate"

// Header names of the W3C trace context, as they travel in NATS headers
// (wire.HeaderTraceParent is the first).
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// Span attribute keys. Ids belong on spans, never on metric labels.
const (
	AttrRunID          = attribute.Key("toolgate.run_id")
	AttrConversationID = attribute.Key("toolgate.conversation_id")
	AttrToolCallID     = attribute.Key("toolgate.tool_call_id")
	AttrTool           = attribute.Key("toolgate.tool")
	AttrKind           = attribute.Key("toolgate.kind")
	AttrOutcome        = attribute.Key("toolgate.outcome")
	AttrAttempt        = attribute.Key("toolgate.attempt")
	AttrDelivered      = attribute.Key("messaging.delivery_count")
)

// propagator is W3C TraceContext only: baggage would carry arbitrary
// caller data across the trust boundary between components.
var propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Propagator is the propagator toolgate uses on NATS headers: W3C
// TraceContext.
func Propagator() propagation.TextMapPropagator { return propagator }

// HeaderCarrier adapts a nats.Header to propagation.TextMapCarrier. NATS
// header names are case-sensitive; Get falls back to a case-insensitive
// match so that a Traceparent set by an HTTP-minded publisher is read too.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string {
	if vs := c[key]; len(vs) > 0 {
		return vs[0]
	}
	for k, vs := range c {
		if len(vs) > 0 && strings.EqualFold(k, key) {
			return vs[0]
		}
	}
	return ""
}

// Set replaces the values of key.
func (c HeaderCarrier) Set(key, value string) { c[key] = []string{value} }

// Keys lists the header names.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes the trace context of ctx into h (traceparent, tracestate).
// It writes nothing when ctx carries no valid span context; h must not be
// nil.
func Inject(ctx context.Context, h nats.Header) {
	propagator.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx carrying the remote span context found in h, or ctx
// unchanged when h has none (or an invalid one).
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}

// InjectMap returns the trace context of ctx as header name → value, to be
// stored with state that outlives the process (a paused run) and restored
// with ExtractMap. It is nil when ctx carries no valid span context.
func InjectMap(ctx context.Context) map[string]string {
	m := propagation.MapCarrier{}
	propagator.Inject(ctx, m)
	if len(m) == 0 {
		return nil
	}
	return m
}

// ExtractMap returns ctx carrying the remote span context stored by
// InjectMap.
func ExtractMap(ctx context.Context, m map[string]string) context.Context {
	if len(m) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier(m))
}

// StartConsumer starts a consumer span for a message delivered from
// subject with headers h: its parent is the trace context in h, so the span
// continues the publisher's trace. ctx's own span, if any, is replaced.
func StartConsumer(ctx context.Context, tracer trace.Tracer, name, subject string, h nats.Header, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	ctx = Extract(ctx, h)
	attrs = append(attrs,
		attribute.String("messaging.system", "nats"),
		attribute.String("messaging.destination.name", subject),
	)
	return tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
}

// Request names the call or approval request a consumer span is of.
type Request struct {
	RunID, ConversationID, ToolCallID, Tool string
	Attempt                                 int
	// Delivered is the delivery count (1 on the first delivery).
	Delivered uint64
}

// StartRequest starts the consumer span "process <subject>" of a
// delivered call or approval request (StartConsumer), with its ids, tool,
// attempt and delivery count; extra adds the consumer's own attributes.
func StartRequest(ctx context.Context, tracer trace.Tracer, subject string, h nats.Header, r Request, extra ...attribute.KeyValue) (context.Context, trace.Span) {
	return StartConsumer(ctx, tracer, "process "+subject, subject, h, append([]attribute.KeyValue{
		AttrRunID.String(r.RunID),
		AttrConversationID.String(r.ConversationID),
		AttrToolCallID.String(r.ToolCallID),
		AttrTool.String(r.Tool),
		AttrAttempt.Int(r.Attempt),
		AttrDelivered.Int64(int64(r.Delivered)),
	}, extra...)...)
}

// HeaderOf returns a nats.Header holding a trace context stored by
// InjectMap, to publish with (bus.CallMessage and the like take extra
// headers). It is empty when m is.
func HeaderOf(m map[string]string) nats.Header {
	h := nats.Header{}
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}

// StartRun starts the span of one agent run. parent is the stored trace
// context the run continues (InjectMap of the span of the reply that
// completed its batch, for a follow-up), so that one trace covers the whole
// conversation across the pause; nil starts a new trace. links are other
// stored contexts the run also follows from (the paused run, the other
// replies of the batch). ctx's own span, if any, is replaced by parent.
func StartRun(ctx context.Context, tracer trace.Tracer, name string, parent map[string]string, links []map[string]string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if parent != nil {
		ctx = ExtractMap(ctx, parent)
	} else {
		ctx = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	}
	opts := []trace.SpanStartOption{trace.WithAttributes(attrs...)}
	if parent == nil {
		opts = append(opts, trace.WithNewRoot())
	}
	for _, l := range links {
		sc := trace.SpanContextFromContext(ExtractMap(context.Background(), l))
		if sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	return tracer.Start(ctx, name, opts...)
}
