package agent

import (
	"encoding/json"
	"time"
)

// MessageKind says who a message is from: a request goes to the model, a
// response comes from it.
type MessageKind string

const (
	KindRequest  MessageKind = "request"
	KindResponse MessageKind = "response"
)

// Message is one entry of a conversation's history. Every message is stamped
// with the run that added it and the conversation that run belongs to.
type Message struct {
	// Kind says whether the message goes to the model or comes from it.
	Kind MessageKind `json:"kind" msgpack:"kind"`
	// Parts are its pieces, in order.
	Parts []Part `json:"parts" msgpack:"parts"`
	// RunID and ConversationID are the run that added it and its
	// conversation; Timestamp when it was added.
	RunID          string    `json:"run_id" msgpack:"run_id"`
	ConversationID string    `json:"conversation_id" msgpack:"conversation_id"`
	Timestamp      time.Time `json:"timestamp" msgpack:"timestamp"`
	// ModelName and Usage are a response's: the model that gave it and
	// what it cost.
	ModelName string `json:"model_name,omitempty" msgpack:"model_name,omitempty"`
	Usage     *Usage `json:"usage,omitempty" msgpack:"usage,omitempty"`
}

// PartKind names what a part holds.
type PartKind string

const (
	PartSystemPrompt PartKind = "system-prompt" // request: Content
	PartUserPrompt   PartKind = "user-prompt"   // request: Content
	PartText         PartKind = "text"          // response: Content
	PartToolCall     PartKind = "tool-call"     // response: ToolName, ToolCallID, Args
	PartToolReturn   PartKind = "tool-return"   // request: ToolName, ToolCallID, Value, Outcome, Metadata
	PartRetryPrompt  PartKind = "retry-prompt"  // request: Content (what to fix), ToolName, ToolCallID
)

// Outcome is how a tool return settled its call.
type Outcome string

const (
	OutcomeSuccess Outcome = "success"
	OutcomeDenied  Outcome = "denied"
	OutcomeFailed  Outcome = "failed"
)

// Part is one piece of a message. It is a flat struct tagged by Kind so that it
// round-trips through JSON and msgpack without custom codecs; fields that do
// not belong to the kind are empty.
type Part struct {
	// Kind says which of the fields below the part holds (PartKind's
	// constants list them).
	Kind PartKind `json:"part_kind" msgpack:"part_kind"`
	// Content is a prompt's, a text's or a retry prompt's text.
	Content string `json:"content,omitempty" msgpack:"content,omitempty"`
	// ToolName and ToolCallID name the call a tool call, tool return or
	// retry prompt is about.
	ToolName   string `json:"tool_name,omitempty" msgpack:"tool_name,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty" msgpack:"tool_call_id,omitempty"`
	// Args are a tool call's, a JSON object.
	Args json.RawMessage `json:"args,omitempty" msgpack:"args,omitempty"`
	// Value is a tool return's result as JSON, Outcome how the call
	// settled, Metadata what its answer kept for the application
	// (deferred.ReturnOf), unseen by the model.
	Value    json.RawMessage `json:"value,omitempty" msgpack:"value,omitempty"`
	Outcome  Outcome         `json:"outcome,omitempty" msgpack:"outcome,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty" msgpack:"metadata,omitempty"`
}

// Usage counts what a run (or one model response) cost.
type Usage struct {
	Requests     int   `json:"requests" msgpack:"requests"`
	InputTokens  int64 `json:"input_tokens" msgpack:"input_tokens"`
	OutputTokens int64 `json:"output_tokens" msgpack:"output_tokens"`
	ToolCalls    int   `json:"tool_calls" msgpack:"tool_calls"`
}
