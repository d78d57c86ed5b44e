package agent

import (
	"context"
	"encoding/json"
)

// RunContext is what a tool body, an args validator, an approval predicate or
// a handler sees of the run. Each call gets its own copy; the slices it holds
// are shared with the run and must not be modified.
type RunContext struct {
	// Deps is the application's dependencies for this run
	// (toolgate.Config.Deps).
	Deps any
	// Caller is what the application that started the run said of who
	// gave its prompt (a JSON object such as {"user":"ann","role":"clerk"};
	// client.StartRequest.Caller), for tools and approval rules that
	// depend on who asks; nil when it said nothing. toolgate passes it on
	// as given: it is as trustworthy as the client that sent it.
	Caller json.RawMessage
	// RunID and ConversationID identify the run and its conversation.
	RunID          string
	ConversationID string
	// ToolCallID and ToolName identify the call; empty for handlers.
	ToolCallID string
	ToolName   string
	// ToolCallIndex is the call's place among the tool calls of its model
	// response, from 0. A model may give two calls one ToolCallID (D9 allows
	// it when at most one of them is deferred); the index still tells them
	// apart, so code that pairs a validator with its body, or keeps state
	// per call, keys by (ToolCallID, ToolCallIndex), never by the id alone.
	ToolCallIndex int
	// ToolCallApproved is true when the call runs because it was approved
	// (D23).
	ToolCallApproved bool
	// ToolCallMetadata is Results.Metadata[ToolCallID] of an approved call;
	// nil when absent (D23).
	ToolCallMetadata json.RawMessage
	// Messages is the history so far, oldest first.
	Messages []Message
	// Retry is how many retries this run has charged to the tool so far (D27).
	Retry int
	// Usage is the run's usage so far.
	Usage Usage

	ctx context.Context
}

// Context is the run's context, cancelled when the run ends or its caller
// gives up.
func (c *RunContext) Context() context.Context {
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}

// WithContext returns a shallow copy of c whose Context is ctx, as
// net/http's Request.WithContext does; the run gives each call its copy
// this way, and a test can build a RunContext for a tool with it.
func (c *RunContext) WithContext(ctx context.Context) *RunContext {
	c2 := *c
	c2.ctx = ctx
	return &c2
}
