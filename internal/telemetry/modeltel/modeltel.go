// Package modeltel measures an agent.Model: each request becomes a client
// span, a latency observation and token counts. It lives apart from
// telemetry so that workers and approvers, which import telemetry, do not
// depend on the agent package.
package modeltel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/telemetry"
)

// Config says where a wrapped model reports.
type Config struct {
	// Metrics receives toolgate_model_request_seconds,
	// toolgate_model_tokens_total and toolgate_model_errors_total, labelled
	// with the model's configured Name (a provider's dated variant goes on
	// the span only). nil records no metrics.
	Metrics *telemetry.OrchestratorMetrics
	// TracerProvider makes one span per request, child of the run's span
	// in the request's context. Defaults to the global provider.
	TracerProvider trace.TracerProvider
}

// Wrap returns m measured as cfg says. Name and responses are m's.
func Wrap(m agent.Model, cfg Config) agent.Model {
	return &model{next: m, metrics: cfg.Metrics, tracer: telemetry.Tracer(cfg.TracerProvider)}
}

type model struct {
	next    agent.Model
	metrics *telemetry.OrchestratorMetrics
	tracer  trace.Tracer
}

func (m *model) Name() string { return m.next.Name() }

func (m *model) Request(ctx context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
	name := m.next.Name()
	ctx, span := m.tracer.Start(ctx, "chat "+name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "chat"),
			attribute.String("gen_ai.request.model", name),
			attribute.Int("toolgate.model.messages", len(req.Messages)),
			attribute.Int("toolgate.model.tools", len(req.Tools)),
		))
	defer span.End()
	start := time.Now()
	resp, err := m.next.Request(ctx, req)
	took := time.Since(start)
	if err != nil {
		m.metrics.ModelError(name)
		span.RecordError(err)
		span.SetStatus(codes.Error, "model request")
		return resp, err
	}
	m.metrics.ModelRequest(name, took, resp.Usage.InputTokens, resp.Usage.OutputTokens)
	span.SetAttributes(
		attribute.String("gen_ai.response.model", resp.ModelName),
		attribute.Int64("gen_ai.usage.input_tokens", resp.Usage.InputTokens),
		attribute.Int64("gen_ai.usage.output_tokens", resp.Usage.OutputTokens),
	)
	return resp, nil
}
