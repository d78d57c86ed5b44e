package orchestrator

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/agent"
)

// Declared frontend tools are refused, with what is wrong, when they could
// not be offered to a model or exceed their bounds.
func TestCheckFrontendTools(t *testing.T) {
	t.Parallel()
	tool := func(name, params string) agent.ToolDef {
		return agent.ToolDef{Name: name, Description: "d", Parameters: json.RawMessage(params)}
	}
	many := make([]agent.ToolDef, MaxFrontendTools+1)
	for i := range many {
		many[i] = tool(fmt.Sprintf("t%d", i), "")
	}
	large := []agent.ToolDef{{Name: "big", Description: strings.Repeat("x", MaxFrontendToolsBytes)}}
	tests := []struct {
		name string
		defs []agent.ToolDef
		want string // in the error; "" for none
	}{
		{name: "none", defs: nil},
		{name: "object schema", defs: []agent.ToolDef{tool("page_color", `{"type":"object","properties":{"color":{"type":"string"}}}`)}},
		{name: "no parameters", defs: []agent.ToolDef{tool("local_time", "")}},
		{name: "as many as allowed", defs: many[:MaxFrontendTools]},
		{name: "too many", defs: many, want: "at most 32"},
		{name: "too large", defs: large, want: "larger than"},
		{name: "name with a space", defs: []agent.ToolDef{tool("page color", "")}, want: "not a name a model can call"},
		{name: "empty name", defs: []agent.ToolDef{tool("", "")}, want: "not a name a model can call"},
		{name: "twice", defs: []agent.ToolDef{tool("a", ""), tool("a", "")}, want: "declared twice"},
		{name: "not JSON", defs: []agent.ToolDef{tool("a", `{`)}, want: "not a JSON Schema object"},
		{name: "not an object schema", defs: []agent.ToolDef{tool("a", `{"type":"string"}`)}, want: `not "object"`},
		{name: "schema that does not compile", defs: []agent.ToolDef{tool("a", `{"type":"object","properties":{"x":{"type":7}}}`)}, want: "parameters:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := checkFrontendTools(tt.defs)
			var be *BadRequestError
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (!errors.As(err, &be) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want a *BadRequestError saying %q", err, tt.want)
			}
		})
	}
}
