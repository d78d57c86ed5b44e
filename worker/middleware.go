package worker

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolgate/toolgate/internal/telemetry/natstrace"
	"github.com/toolgate/toolgate/internal/worker/callctx"
	"github.com/toolgate/toolgate/wire"
)

// outcomeOf names how a handler answered: return, retry, failed, or error
// (handed back for redelivery).
func outcomeOf(ctx context.Context, r Reply, err error) string {
	var ae *answerError
	switch {
	case err == nil && r.Outcome != "":
		return string(r.Outcome)
	case err == nil:
		return string(wire.OutcomeReturn)
	case errors.As(err, &ae):
		return string(ae.outcome)
	case callctx.TimedOut(ctx):
		return string(wire.OutcomeFailed)
	}
	return OutcomeError
}

// Tracing makes a span "tool <name>" per call, a child of the trace the
// call's headers carry (the orchestrator's run), with the run,
// conversation and call ids; an answer other than return marks it as an
// error. tp nil makes no spans: pass otel.GetTracerProvider() for the
// global one (the worker does not link the global on its own).
func Tracing(tp trace.TracerProvider) Middleware {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	tracer := tp.Tracer(natstrace.InstrumentationName)
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, call Call) (Reply, error) {
			ctx, span := tracer.Start(ctx, "tool "+call.ToolName, trace.WithAttributes(
				natstrace.AttrRunID.String(call.RunID),
				natstrace.AttrConversationID.String(call.ConversationID),
				natstrace.AttrToolCallID.String(call.ToolCallID),
				natstrace.AttrTool.String(call.ToolName),
				natstrace.AttrAttempt.Int(call.Attempt),
			))
			defer span.End()
			r, err := next.Handle(ctx, call)
			outcome := outcomeOf(ctx, r, err)
			span.SetAttributes(natstrace.AttrOutcome.String(outcome))
			if outcome != string(wire.OutcomeReturn) {
				if err != nil {
					span.RecordError(err)
				}
				span.SetStatus(codes.Error, outcome)
			}
			return r, err
		})
	}
}
