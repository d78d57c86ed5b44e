package agent

import (
	"context"
	"encoding/json"
)

// Model turns a conversation into the model's next response. A program may
// implement it (toolgate.Config.Model); toolgate.NewOpenAIModel returns one
// for an OpenAI-compatible endpoint.
type Model interface {
	// Name identifies the model in responses and logs.
	Name() string
	// Request sends the whole history and returns the response's parts (text
	// and tool-call parts, in the order the model emitted them).
	Request(ctx context.Context, req ModelRequest) (ModelResponse, error)
}

// ModelRequest is what one model call sees.
type ModelRequest struct {
	Instructions string    // system instructions; empty for none
	Messages     []Message // history, oldest first, ending with a request
	Tools        []ToolDef // tools the model may call
	// StreamFunc, when set, receives text deltas as a streaming model produces
	// them; the full response is still returned by Request.
	StreamFunc func(delta string)
}

// ModelResponse is one model answer.
type ModelResponse struct {
	// Parts are the text and tool-call parts, in the order the model
	// emitted them.
	Parts []Part
	// ModelName is the model that answered, as it names itself.
	ModelName string
	// Usage counts the tokens where the model reports them; the loop
	// fills Requests.
	Usage Usage
}

// ToolDef is how a tool is described to a model.
type ToolDef struct {
	Name        string          `json:"name" msgpack:"name"`
	Description string          `json:"description" msgpack:"description"`
	Parameters  json.RawMessage `json:"parameters" msgpack:"parameters"` // JSON Schema of the args object
}
