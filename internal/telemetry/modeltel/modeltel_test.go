package modeltel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/telemetry/modeltel"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
)

func TestWrapMeasuresRequests(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	tp, exp := telemetrytest.Tracer(t)
	calls := 0
	inner := agent.FunctionModel("gpt-x", func(context.Context, agent.ModelRequest) (agent.ModelResponse, error) {
		calls++
		if calls == 3 {
			return agent.ModelResponse{}, errors.New("rate limited")
		}
		return agent.ModelResponse{ModelName: "gpt-x-2025", Usage: agent.Usage{InputTokens: 100, OutputTokens: 7}}, nil
	})
	m := modeltel.Wrap(inner, modeltel.Config{Metrics: telemetry.NewOrchestratorMetrics(reg), TracerProvider: tp})
	if m.Name() != "gpt-x" {
		t.Errorf("Name = %q", m.Name())
	}

	ctx, run := telemetry.Tracer(tp).Start(t.Context(), "run")
	for range 2 {
		resp, err := m.Request(ctx, agent.ModelRequest{})
		if err != nil || resp.ModelName != "gpt-x-2025" {
			t.Fatalf("Request = %+v, %v", resp, err)
		}
	}
	if _, err := m.Request(ctx, agent.ModelRequest{}); err == nil {
		t.Fatal("the inner model's error was lost")
	}
	run.End()

	fams := telemetrytest.Scrape(t, telemetry.Handler(reg))
	for _, s := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"toolgate_model_request_seconds", []string{"model", "gpt-x"}, 2},
		{"toolgate_model_tokens_total", []string{"model", "gpt-x", "direction", "input"}, 200},
		{"toolgate_model_tokens_total", []string{"model", "gpt-x", "direction", "output"}, 14},
		{"toolgate_model_errors_total", []string{"model", "gpt-x"}, 1},
	} {
		if got, ok := fams.Value(s.name, s.labels...); !ok || got != s.want {
			t.Errorf("%s%v = %v (found %v), want %v", s.name, s.labels, got, ok, s.want)
		}
	}

	var chats, failed int
	for _, s := range exp.GetSpans() {
		if s.Name != "chat gpt-x" {
			continue
		}
		chats++
		if s.Parent.SpanID() != run.SpanContext().SpanID() {
			t.Errorf("model span parent %s, want the run %s", s.Parent.SpanID(), run.SpanContext().SpanID())
		}
		if s.Status.Code == codes.Error {
			failed++
		}
	}
	if chats != 3 || failed != 1 {
		t.Errorf("%d model spans, %d failed; want 3 and 1", chats, failed)
	}
}
