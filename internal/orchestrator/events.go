package orchestrator

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
)

// Event types the orchestrator adds to the agent's own (agent.EventKind).
const (
	EventRunStarted   = "run_started"
	EventRunPaused    = "run_paused"
	EventRunCompleted = "run_completed"
	EventRunFailed    = "run_failed"
	EventReplyApplied = "reply_applied"
	EventCallsExpired = "calls_expired"
)

// publishEvent publishes one event on toolgate.event.<conversation>. Events
// are for UIs: a failure is logged and the work goes on.
func (o *Orchestrator) publishEvent(ctx context.Context, convID, runID, typ, callID string, data any) {
	var raw json.RawMessage
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			o.log.WarnContext(ctx, "encode event", slog.String("type", typ), slog.String("error", err.Error()))
			return
		}
		raw = b
	}
	ev := bus.Event{ConversationID: convID, RunID: runID, Type: typ, ToolCallID: callID, Data: raw, Time: o.clock().UTC()}
	if _, err := o.bus.PublishEvent(ctx, ev); err != nil {
		o.log.WarnContext(ctx, "publish event", slog.String("conversation_id", convID), slog.String("type", typ),
			slog.String("error", err.Error()))
	}
}

// publishAgentEvent forwards an agent event; its JSON form is the data.
func (o *Orchestrator) publishAgentEvent(ctx context.Context, convID, runID string, ev agent.Event) {
	callID := ""
	if ev.Part != nil {
		callID = ev.Part.ToolCallID
	}
	if ev.Kind == agent.EventRunDone && ev.Result != nil {
		// The history is in KV and in the other events; the event stays
		// small.
		r := *ev.Result
		r.NewMessages = nil
		ev.Result = &r
	}
	o.publishEvent(ctx, convID, runID, string(ev.Kind), callID, ev)
}
