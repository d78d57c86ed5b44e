package approver_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
	"github.com/toolgate/toolgate/wire"
)

// decisionHeaders reads the headers of the decisions stored for run.
func decisionHeaders(t *testing.T, b *bus.Bus, run string) []nats.Header {
	t.Helper()
	subj, err := wire.DecisionSubject(run)
	if err != nil {
		t.Fatal(err)
	}
	var out []nats.Header
	for _, m := range bustest.Messages(t, b, wire.StreamReplies, subj) {
		out = append(out, m.Headers())
	}
	return out
}

// Each request becomes a span under the trace context it was published
// with; the decision carries that span's context; the metrics count each
// outcome and the decision latencies.
func TestApproverMetricsAndTrace(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	pol, err := approver.ParsePolicy([]byte(e2ePolicy))
	if err != nil {
		t.Fatal(err)
	}
	tp, exp := telemetrytest.Tracer(t)
	reg := prometheus.NewRegistry()
	events := runApprover(t, approver.Config{
		Bus: b, ID: "bot-1", Policy: pol,
		Metrics: telemetry.NewApproverMetrics(reg), TracerProvider: tp,
	})

	// The orchestrator's side: one run span per request.
	tracer := telemetry.Tracer(tp)
	parents := map[string]trace.SpanContext{}
	for _, r := range []wire.ApprovalRequest{
		approvalRequest(t, "run-a", "c1", "delete_file", `{"path":"/tmp/x"}`),
		approvalRequest(t, "run-b", "c2", "write_file", `{"path":"a","content":"b"}`),
		approvalRequest(t, "run-c", "c3", "pay", `{"amount":500}`),
	} {
		ctx, span := tracer.Start(t.Context(), "run "+r.RunID)
		hdr := nats.Header{}
		telemetry.Inject(ctx, hdr)
		span.End()
		parents[r.ToolCallID] = span.SpanContext()
		if _, err := b.PublishApproval(bustest.Context(t), r, hdr); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]approver.Outcome{}
	for range 3 {
		h := next(t, events)
		got[h.req.ToolCallID] = h.outcome
	}
	if got["c1"] != approver.OutcomeDenied || got["c2"] != approver.OutcomeApproved || got["c3"] != approver.OutcomeEscalated {
		t.Fatalf("outcomes %v", got)
	}

	spans := map[string]sdktrace.ReadOnlySpan{}
	bustest.Poll(t, bustest.Timeout, "approver spans", func() (bool, string) {
		for _, s := range exp.GetSpans().Snapshots() {
			if s.SpanKind() == trace.SpanKindConsumer {
				spans[telemetrytest.Attr(s, telemetry.AttrToolCallID)] = s
			}
		}
		return len(spans) >= 3, fmt.Sprintf("%v; all: %s", spans, telemetrytest.SpanNames(exp.GetSpans()))
	})
	for id, want := range parents {
		s := spans[id]
		if s.SpanContext().TraceID() != want.TraceID() || s.Parent().SpanID() != want.SpanID() {
			t.Errorf("%s: span trace %s parent %s, want %s %s", id, s.SpanContext().TraceID(), s.Parent().SpanID(), want.TraceID(), want.SpanID())
		}
		if got := telemetrytest.Attr(s, telemetry.AttrOutcome); got != string(map[string]approver.Outcome{"c1": "denied", "c2": "approved", "c3": "escalated"}[id]) {
			t.Errorf("%s: span outcome %q", id, got)
		}
	}
	for id, run := range map[string]string{"c1": "run-a", "c2": "run-b"} {
		hs := decisionHeaders(t, b, run)
		if len(hs) != 1 {
			t.Fatalf("%s: %d decisions", id, len(hs))
		}
		sc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), hs[0]))
		if sc.TraceID() != parents[id].TraceID() || sc.SpanID() != spans[id].SpanContext().SpanID() {
			t.Errorf("%s: decision trace context %s/%s, want the approver span %s/%s", id,
				sc.TraceID(), sc.SpanID(), parents[id].TraceID(), spans[id].SpanContext().SpanID())
		}
	}

	fams := telemetrytest.Scrape(t, telemetry.Handler(reg))
	for _, s := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"toolgate_decisions_total", []string{"approver", "bot-1", "action", "denied"}, 1},
		{"toolgate_decisions_total", []string{"approver", "bot-1", "action", "approved"}, 1},
		{"toolgate_decisions_total", []string{"approver", "bot-1", "action", "escalated"}, 1},
		{"toolgate_approver_decision_seconds", []string{"approver", "bot-1", "action", "denied"}, 1},
		{"toolgate_approver_decision_seconds", []string{"approver", "bot-1", "action", "approved"}, 1},
	} {
		if got, found := fams.Value(s.name, s.labels...); !found || got != s.want {
			t.Errorf("%s%v = %v (found %v), want %v", s.name, s.labels, got, found, s.want)
		}
	}
	if _, found := fams.Value("toolgate_approver_decision_seconds", "action", "escalated"); found {
		t.Error("an escalation was observed as a decision")
	}
}
