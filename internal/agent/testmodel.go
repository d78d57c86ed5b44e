package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
)

// TestModel is an offline model that exercises an agent's tools: for each
// user prompt it first calls every tool once, with args generated from the
// tool's JSON Schema, and then answers with a JSON object mapping each tool
// name to what its call returned (a retry prompt shows as {"retry": msg}).
// Without tools it answers "success (no tool calls)".
type TestModel struct{}

// NewTestModel makes a TestModel.
func NewTestModel() *TestModel { return &TestModel{} }

// Name is "test".
func (*TestModel) Name() string { return "test" }

// Request answers as described on TestModel.
func (*TestModel) Request(_ context.Context, req ModelRequest) (ModelResponse, error) {
	prompt := -1
	for i, m := range req.Messages {
		if m.Kind != KindRequest {
			continue
		}
		for _, p := range m.Parts {
			if p.Kind == PartUserPrompt {
				prompt = i
			}
		}
	}
	answered := false
	for _, m := range req.Messages[prompt+1:] {
		if m.Kind == KindResponse {
			answered = true
		}
	}
	if !answered && len(req.Tools) > 0 {
		parts := make([]Part, 0, len(req.Tools))
		for i, t := range req.Tools {
			args, err := exampleArgs(t.Parameters)
			if err != nil {
				return ModelResponse{}, fmt.Errorf("test model: tool %s: %w", t.Name, err)
			}
			parts = append(parts, Part{Kind: PartToolCall, ToolName: t.Name, ToolCallID: fmt.Sprintf("test_%d_%s", i, t.Name), Args: args})
		}
		return ModelResponse{Parts: parts, ModelName: "test"}, nil
	}
	summary := map[string]any{}
	for _, m := range req.Messages[prompt+1:] {
		if m.Kind != KindRequest {
			continue
		}
		for _, p := range m.Parts {
			switch p.Kind {
			case PartToolReturn:
				summary[p.ToolName] = json.RawMessage(p.Value)
			case PartRetryPrompt:
				summary[p.ToolName] = map[string]string{"retry": p.Content}
			}
		}
	}
	text := "success (no tool calls)"
	if len(summary) > 0 {
		b, err := json.Marshal(summary)
		if err != nil {
			return ModelResponse{}, fmt.Errorf("test model: summary: %w", err)
		}
		text = string(b)
	}
	if req.StreamFunc != nil {
		req.StreamFunc(text)
	}
	return ModelResponse{Parts: []Part{{Kind: PartText, Content: text}}, ModelName: "test"}, nil
}

// exampleArgs makes a value that satisfies simple schemas: every property
// filled, enums and consts honoured, numbers at their minimum.
func exampleArgs(schema json.RawMessage) (json.RawMessage, error) {
	var s map[string]any
	if len(schema) > 0 {
		if err := json.Unmarshal(schema, &s); err != nil {
			return nil, err
		}
	}
	v := exampleValue(s, 0)
	if _, ok := v.(map[string]any); !ok {
		v = map[string]any{}
	}
	return json.Marshal(v)
}

func exampleValue(s map[string]any, depth int) any {
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	if d, ok := s["default"]; ok {
		return d
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 {
			if m, ok := alts[0].(map[string]any); ok {
				return exampleValue(m, depth+1)
			}
		}
	}
	typ := s["type"]
	if ts, ok := typ.([]any); ok && len(ts) > 0 {
		typ = ts[0]
	}
	if typ == nil {
		if _, ok := s["properties"]; ok {
			typ = "object"
		}
	}
	switch typ {
	case "object":
		out := map[string]any{}
		if depth > 8 {
			return out
		}
		props, _ := s["properties"].(map[string]any)
		names := make([]string, 0, len(props))
		for k := range props {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			p, _ := props[k].(map[string]any)
			out[k] = exampleValue(p, depth+1)
		}
		return out
	case "array":
		n := 0
		if m, ok := s["minItems"].(float64); ok {
			n = int(m)
		}
		items, _ := s["items"].(map[string]any)
		out := make([]any, n)
		for i := range out {
			out[i] = exampleValue(items, depth+1)
		}
		return out
	case "string":
		n := 1
		if m, ok := s["minLength"].(float64); ok && int(m) > n {
			n = int(m)
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a'
		}
		return string(b)
	case "integer", "number":
		if m, ok := s["minimum"].(float64); ok {
			return m
		}
		if m, ok := s["exclusiveMinimum"].(float64); ok {
			return m + 1
		}
		return 0
	case "boolean":
		return false
	case "null":
		return nil
	}
	return "a"
}
