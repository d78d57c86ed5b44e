package orchestrator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"

	"github.com/toolgate/toolgate/internal/agent"
)

// Bounds of StartRequest.FrontendTools: the tools a frontend declares are
// stored with the conversation and offered to the model in its every run.
const (
	MaxFrontendTools      = 32
	MaxFrontendToolsBytes = 64 << 10
)

// checkFrontendTools refuses declared tools that cannot be offered: too
// many or too large, a name a model cannot call or given twice, parameters
// that are no JSON Schema of an object (*BadRequestError).
func checkFrontendTools(defs []agent.ToolDef) error {
	if len(defs) > MaxFrontendTools {
		return &BadRequestError{fmt.Sprintf("frontend tools: %d, at most %d", len(defs), MaxFrontendTools)}
	}
	if raw, _ := json.Marshal(defs); len(raw) > MaxFrontendToolsBytes {
		return &BadRequestError{fmt.Sprintf("frontend tools: larger than %d bytes", MaxFrontendToolsBytes)}
	}
	seen := map[string]bool{}
	for _, def := range defs {
		if !toolNameRE.MatchString(def.Name) {
			return &BadRequestError{fmt.Sprintf("frontend tool %q: not a name a model can call (letters, digits, _ and -, at most 64)", def.Name)}
		}
		if seen[def.Name] {
			return &BadRequestError{fmt.Sprintf("frontend tool %s: declared twice", def.Name)}
		}
		seen[def.Name] = true
		def.Parameters = frontendParams(def.Parameters)
		var schema map[string]any
		if err := json.Unmarshal(def.Parameters, &schema); err != nil {
			return &BadRequestError{fmt.Sprintf("frontend tool %s: parameters: not a JSON Schema object", def.Name)}
		}
		if typ, ok := schema["type"]; ok && typ != "object" {
			return &BadRequestError{fmt.Sprintf("frontend tool %s: parameters: type %v, not \"object\"", def.Name, typ)}
		}
		if _, err := agent.NewRawTool(def, func(*agent.RunContext, json.RawMessage) (any, error) { return nil, nil }); err != nil {
			return &BadRequestError{fmt.Sprintf("frontend tool %s: parameters: %v", def.Name, err)}
		}
	}
	return nil
}

func frontendParams(p json.RawMessage) json.RawMessage {
	if len(p) == 0 || string(p) == "null" {
		return json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return p
}

// frontendClash refuses a declared tool named as a tool agent cfg offers:
// a frontend does not stand in for the agent's own tools. One of the
// agent's executor: frontend tools is the frontend's already: its
// declaration is not refused, and the agent's config of it holds.
func (d *discovery) frontendClash(cfg *AgentConfig, defs []agent.ToolDef) error {
	for _, def := range defs {
		tc := d.toolsNow(cfg, def.Name)
		if tc != nil && tc.Executor != ExecutorFrontend || slices.ContainsFunc(d.inProcess, func(t agent.Tool) bool { return t.Name() == def.Name }) {
			return &BadRequestError{fmt.Sprintf("frontend tool %s: the agent has a tool of that name", def.Name)}
		}
	}
	return nil
}

// addFrontend offers run rt the tools its conversation's frontend
// declared, as tools of executor frontend: their calls wait for the
// frontend's answer. A name a tool of the run has already (a worker
// advertised it since) stays that tool's.
func (d *discovery) addFrontend(rt *runTools, defs []agent.ToolDef) {
	for _, def := range defs {
		if tc := rt.tool(def.Name); tc != nil && tc.Executor == ExecutorFrontend {
			continue // the agent's own frontend tool
		}
		if rt.tool(def.Name) != nil || slices.ContainsFunc(d.inProcess, func(t agent.Tool) bool { return t.Name() == def.Name }) {
			d.once.warn("frontend:"+def.Name, "frontend tool not offered: the agent has a tool of that name", slog.String("tool", def.Name))
			continue
		}
		params := frontendParams(def.Parameters)
		sum := sha256.Sum256([]byte(def.Name + "\x00" + def.Description + "\x00" + string(params)))
		if rt.discovered == nil {
			rt.discovered = map[string]*ToolConfig{}
		}
		rt.discovered[def.Name] = &ToolConfig{
			Name: def.Name, Description: def.Description, Parameters: params,
			Executor: ExecutorFrontend, digest: "frontend:" + hex.EncodeToString(sum[:]),
		}
		rt.names = append(rt.names, def.Name)
	}
	slices.Sort(rt.names)
}
