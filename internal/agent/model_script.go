package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/goccy/go-yaml"
)

// ScriptResponse is one scripted model response, in the conformance
// scenarios' RESPONSE shape: text first (if any), then the calls in order.
type ScriptResponse struct {
	Calls []ScriptCall `json:"calls,omitempty"`
	Text  string       `json:"text,omitempty"`
}

// ScriptCall is one scripted tool call. An empty ID becomes
// "call_<response>_<call>", so that ids are the same on every replay.
type ScriptCall struct {
	Tool string          `json:"tool"`
	ID   string          `json:"id,omitempty"`
	Args json.RawMessage `json:"args,omitempty"`
}

// ScriptModel is an offline model that plays a fixed list of responses. It
// answers a request with the n-th response, n being the number of model
// responses already in the request's history: every conversation plays the
// script from its start, a resumed run continues where the paused one
// stopped, and a restarted process replays the same answers. It streams text
// word by word when the request has a StreamFunc.
type ScriptModel struct {
	name      string
	responses []ScriptResponse
}

// NewScriptModel makes a model that plays responses. An empty name means
// "script".
func NewScriptModel(name string, responses []ScriptResponse) *ScriptModel {
	if name == "" {
		name = "script"
	}
	return &ScriptModel{name: name, responses: append([]ScriptResponse(nil), responses...)}
}

// ParseScript reads a list of responses written in JSON or YAML.
func ParseScript(data []byte) ([]ScriptResponse, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("parse script: %w", err)
	}
	var rs []ScriptResponse
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rs); err != nil {
		return nil, fmt.Errorf("parse script: %w", err)
	}
	for i, r := range rs {
		if r.Text == "" && len(r.Calls) == 0 {
			return nil, fmt.Errorf("parse script: response %d has neither text nor calls", i)
		}
		for j, c := range r.Calls {
			if c.Tool == "" {
				return nil, fmt.Errorf("parse script: response %d, call %d: tool is empty", i, j)
			}
		}
	}
	return rs, nil
}

// LoadScriptModel reads a script file (JSON or YAML, a list of responses);
// the model is named after the file.
func LoadScriptModel(path string) (*ScriptModel, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load script: %w", err)
	}
	rs, err := ParseScript(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return NewScriptModel("script:"+path, rs), nil
}

// Name is the model's name.
func (m *ScriptModel) Name() string { return m.name }

// Request answers with the script's next response for this conversation.
func (m *ScriptModel) Request(ctx context.Context, req ModelRequest) (ModelResponse, error) {
	n := 0
	for _, msg := range req.Messages {
		if msg.Kind == KindResponse {
			n++
		}
	}
	if n >= len(m.responses) {
		return ModelResponse{}, fmt.Errorf("script %s exhausted: the conversation already has %d model responses, the script has %d", m.name, n, len(m.responses))
	}
	r := m.responses[n]
	var parts []Part
	if r.Text != "" {
		if req.StreamFunc != nil {
			for _, w := range strings.SplitAfter(r.Text, " ") {
				if err := ctx.Err(); err != nil {
					return ModelResponse{}, err
				}
				req.StreamFunc(w)
			}
		}
		parts = append(parts, Part{Kind: PartText, Content: r.Text})
	}
	for i, c := range r.Calls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", n, i)
		}
		args := c.Args
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		parts = append(parts, Part{Kind: PartToolCall, ToolName: c.Tool, ToolCallID: id, Args: args})
	}
	return ModelResponse{Parts: parts, ModelName: m.name}, nil
}
