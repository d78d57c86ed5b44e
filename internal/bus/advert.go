package bus

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// Executors a tool advert may name.
var advertExecutors = []string{"builtin", "exec", "http", "mcp", "go", "custom"}

// ToolAdvert is the value a worker puts under its tool's name in the
// toolgate_tools bucket (schemas/tool_advert.schema.json), as JSON. Workers
// serving the same tool overwrite each other; the entry expires with the
// bucket's TTL once none renews it, and a worker deletes its own entry for
// a tool its MCP server withdrew.
type ToolAdvert struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Parameters is the JSON Schema of the tool's args (an MCP tool's
	// inputSchema).
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// Kind is "call": the tool's calls are external (kind=call deferrals).
	Kind string `json:"kind"`
	// Executor is "builtin", "exec", "http", "mcp", "go" (a handler of
	// the public worker package) or "custom".
	Executor string `json:"executor"`
	// MCPServer names the MCP server the tool comes from (tool-worker
	// --mcp NAME=…), MCPTool the tool's name on it (without the prefix),
	// and Annotations are its MCP annotations (readOnlyHint,
	// destructiveHint, …); set for executor "mcp" only.
	MCPServer   string          `json:"mcp_server,omitempty"`
	MCPTool     string          `json:"mcp_tool,omitempty"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
	WorkerID    string          `json:"worker_id"`
	At          time.Time       `json:"at"`
}

// Validate checks what a reader of the bucket relies on; each error names
// the field.
func (a ToolAdvert) Validate() error {
	if err := wire.ValidateToken("name", a.Name); err != nil {
		return err
	}
	if a.Kind != wire.ReplyKindCall {
		return fmt.Errorf("kind %q: want %q", a.Kind, wire.ReplyKindCall)
	}
	if !slices.Contains(advertExecutors, a.Executor) {
		return fmt.Errorf("executor %q: want one of %v", a.Executor, advertExecutors)
	}
	if a.WorkerID == "" {
		return errors.New("worker_id is empty")
	}
	if a.At.IsZero() {
		return errors.New("at is missing")
	}
	if len(a.Parameters) > 0 && string(a.Parameters) != "null" {
		var schema map[string]any
		if err := json.Unmarshal(a.Parameters, &schema); err != nil {
			return fmt.Errorf("parameters: want a JSON Schema object: %w", err)
		}
	}
	if len(a.Annotations) > 0 && string(a.Annotations) != "null" {
		var m map[string]any
		if err := json.Unmarshal(a.Annotations, &m); err != nil {
			return fmt.Errorf("annotations: want an object: %w", err)
		}
	}
	return nil
}

// DecodeToolAdvert reads and checks an advert as stored in the bucket.
func DecodeToolAdvert(data []byte) (ToolAdvert, error) {
	var a ToolAdvert
	if err := json.Unmarshal(data, &a); err != nil {
		return ToolAdvert{}, fmt.Errorf("tool advert: %w", err)
	}
	if err := a.Validate(); err != nil {
		return ToolAdvert{}, fmt.Errorf("tool advert: %w", err)
	}
	return a, nil
}
