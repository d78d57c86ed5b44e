package agent

import (
	"time"

	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/wire"
)

// EventKind names an event of a run's stream.
type EventKind string

const (
	// EventTextDelta: Delta holds text a streaming model produced.
	EventTextDelta EventKind = wire.EventTextDelta
	// EventModelResponse: Message holds a model response as added to history.
	EventModelResponse EventKind = wire.EventModelResponse
	// EventToolCall: Part holds a tool-call part whose args were validated
	// (D28).
	EventToolCall EventKind = wire.EventToolCall
	// EventToolResult: Part holds the tool-return or retry-prompt part that
	// settled a call (D28, D30, D31).
	EventToolResult EventKind = wire.EventToolResult
	// EventDeferredRequests: Requests holds a step's whole batch, before any
	// handler runs (D29).
	EventDeferredRequests EventKind = wire.EventDeferredRequests
	// EventDeferredResults: Results holds what handlers resolved (D30).
	EventDeferredResults EventKind = wire.EventDeferredResults
	// EventRunDone: Result holds the run's result; always the last event of
	// a run that did not fail.
	EventRunDone EventKind = wire.EventRunDone
)

// Event is one entry of a run's event stream. Kind says which of the other
// fields is set. Events encode to JSON for the event stream on the bus.
//
// The pointers share the run's state, so that an event costs no copy: a
// consumer reads them and must not modify them; what they point to does not
// change after the event is yielded. EventTextDelta events come only from a
// model that streams (it calls ModelRequest.StreamFunc); Run asks no model
// to stream.
type Event struct {
	Kind           EventKind          `json:"kind"`
	RunID          string             `json:"run_id"`
	ConversationID string             `json:"conversation_id"`
	Time           time.Time          `json:"time"`
	Delta          string             `json:"delta,omitempty"`
	Part           *Part              `json:"part,omitempty"`
	Message        *Message           `json:"message,omitempty"`
	Requests       *deferred.Requests `json:"requests,omitempty"`
	Results        *deferred.Results  `json:"results,omitempty"`
	Result         *RunResult         `json:"result,omitempty"`
}
