package worker

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/telemetry"
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
	case errors.Is(context.Cause(ctx), errTimedOut):
		return string(wire.OutcomeFailed)
	}
	return telemetry.CallOutcomeError
}

// Tracing makes a span "tool <name>" per call, a child of the trace the
// call's headers carry (the orchestrator's run), with the run,
// conversation and call ids; an answer other than return marks it as an
// error. tp nil uses the global provider.
func Tracing(tp trace.TracerProvider) Middleware {
	tracer := telemetry.Tracer(tp)
	return func(next Handler) Handler {
		return HandlerFunc(func(ctx context.Context, call Call) (Reply, error) {
			ctx, span := tracer.Start(ctx, "tool "+call.ToolName, trace.WithAttributes(
				telemetry.AttrRunID.String(call.RunID),
				telemetry.AttrConversationID.String(call.ConversationID),
				telemetry.AttrToolCallID.String(call.ToolCallID),
				telemetry.AttrTool.String(call.ToolName),
				telemetry.AttrAttempt.Int(call.Attempt),
			))
			defer span.End()
			r, err := next.Handle(ctx, call)
			outcome := outcomeOf(ctx, r, err)
			span.SetAttributes(telemetry.AttrOutcome.String(outcome))
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
