package openai

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"strings"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"

	"github.com/toolgate/toolgate/internal/agent"
)

// retrySuffix is what Pydantic AI appends to a retry prompt; models trained
// on agent traces recognise it.
const retrySuffix = "\n\nFix the errors and try again."

const (
	deniedPrefix   = "The tool call was denied"
	defaultDenied  = deniedPrefix + "."
	failedPrefix   = "The tool call failed"
	defaultFailed  = failedPrefix + "."
	emptyArguments = "{}"
)

func (m *Model) params(req agent.ModelRequest) (oai.ChatCompletionNewParams, error) {
	msgs, err := messages(req.Instructions, req.Messages)
	if err != nil {
		return oai.ChatCompletionNewParams{}, err
	}
	tools, err := tools(req.Tools)
	if err != nil {
		return oai.ChatCompletionNewParams{}, err
	}
	p := oai.ChatCompletionNewParams{
		Model:    m.cfg.Model,
		Messages: msgs,
		Tools:    tools,
	}
	if m.cfg.Temperature != nil {
		p.Temperature = oai.Float(*m.cfg.Temperature)
	}
	if m.cfg.Stream {
		p.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
	}
	return p, nil
}

func messages(instructions string, history []agent.Message) ([]oai.ChatCompletionMessageParamUnion, error) {
	var out []oai.ChatCompletionMessageParamUnion
	if instructions != "" {
		out = append(out, oai.SystemMessage(instructions))
	}
	for i, msg := range history {
		switch msg.Kind {
		case agent.KindRequest:
			ms, err := requestMessages(msg.Parts)
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			out = append(out, ms...)
		case agent.KindResponse:
			ms, err := responseMessage(msg.Parts)
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
			out = append(out, ms)
		default:
			return nil, fmt.Errorf("message %d: unknown kind %q", i, msg.Kind)
		}
	}
	return out, nil
}

// requestMessages puts tool replies before system and user messages: OpenAI
// rejects a user message between an assistant's tool calls and their replies.
func requestMessages(parts []agent.Part) ([]oai.ChatCompletionMessageParamUnion, error) {
	var toolMsgs, other []oai.ChatCompletionMessageParamUnion
	for _, p := range parts {
		switch p.Kind {
		case agent.PartSystemPrompt:
			other = append(other, oai.SystemMessage(p.Content))
		case agent.PartUserPrompt:
			other = append(other, oai.UserMessage(p.Content))
		case agent.PartToolReturn:
			text := toolReturnText(p)
			if p.ToolCallID == "" {
				other = append(other, oai.UserMessage(fmt.Sprintf("Tool %s returned: %s", p.ToolName, text)))
				continue
			}
			toolMsgs = append(toolMsgs, oai.ToolMessage(text, p.ToolCallID))
		case agent.PartRetryPrompt:
			text := p.Content + retrySuffix
			if p.ToolCallID == "" {
				other = append(other, oai.UserMessage(text))
				continue
			}
			toolMsgs = append(toolMsgs, oai.ToolMessage(text, p.ToolCallID))
		default:
			return nil, fmt.Errorf("part kind %q in a request", p.Kind)
		}
	}
	return append(toolMsgs, other...), nil
}

func responseMessage(parts []agent.Part) (oai.ChatCompletionMessageParamUnion, error) {
	var (
		texts []string
		calls []oai.ChatCompletionMessageToolCallUnionParam
	)
	for _, p := range parts {
		switch p.Kind {
		case agent.PartText:
			texts = append(texts, p.Content)
		case agent.PartToolCall:
			calls = append(calls, oai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &oai.ChatCompletionMessageFunctionToolCallParam{
					ID: p.ToolCallID,
					Function: oai.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      p.ToolName,
						Arguments: argumentsText(p.Args),
					},
				},
			})
		default:
			return oai.ChatCompletionMessageParamUnion{}, fmt.Errorf("part kind %q in a response", p.Kind)
		}
	}
	var a oai.ChatCompletionAssistantMessageParam
	// An assistant message needs content or tool calls; an empty answer is
	// sent as empty text so the history keeps its shape.
	if len(texts) > 0 || len(calls) == 0 {
		a.Content.OfString = oai.String(strings.Join(texts, "\n\n"))
	}
	a.ToolCalls = calls
	return oai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
}

// argumentsText undoes what toolCallArgs did to the model's text.
func argumentsText(args json.RawMessage) string {
	args = bytes.TrimSpace(args)
	if len(args) == 0 {
		return emptyArguments
	}
	if args[0] == '"' {
		var s string
		if json.Unmarshal(args, &s) == nil {
			return s
		}
	}
	return string(args)
}

// toolReturnText renders a tool return for the model; see the package doc.
func toolReturnText(p agent.Part) string {
	msg := valueText(p.Value)
	if msg == "" {
		msg = p.Content
	}
	switch p.Outcome {
	case agent.OutcomeDenied:
		if msg == "" || strings.HasPrefix(msg, deniedPrefix) {
			return cmp.Or(msg, defaultDenied)
		}
		return deniedPrefix + ": " + msg
	case agent.OutcomeFailed:
		if msg == "" || strings.HasPrefix(msg, failedPrefix) {
			return cmp.Or(msg, defaultFailed)
		}
		return failedPrefix + ": " + msg
	}
	if msg == "" {
		return "null"
	}
	return msg
}

// valueText renders a JSON value as text: a string as itself, anything else
// as compact JSON. Nothing (no value) renders as "".
func valueText(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return ""
	}
	if v[0] == '"' {
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
	}
	var buf bytes.Buffer
	if json.Compact(&buf, v) != nil {
		return string(v)
	}
	return buf.String()
}

func tools(defs []agent.ToolDef) ([]oai.ChatCompletionToolUnionParam, error) {
	if len(defs) == 0 {
		return nil, nil
	}
	out := make([]oai.ChatCompletionToolUnionParam, 0, len(defs))
	for _, d := range defs {
		params, err := schemaObject(d.Parameters)
		if err != nil {
			return nil, fmt.Errorf("tool %s parameters: %w", d.Name, err)
		}
		fn := shared.FunctionDefinitionParam{Name: d.Name, Parameters: params}
		if d.Description != "" {
			fn.Description = oai.String(d.Description)
		}
		out = append(out, oai.ChatCompletionFunctionTool(fn))
	}
	return out, nil
}

// schemaObject keeps every value of the schema byte for byte; only the order
// of its top-level keys may change.
func schemaObject(schema json.RawMessage) (shared.FunctionParameters, error) {
	if len(bytes.TrimSpace(schema)) == 0 {
		return shared.FunctionParameters{"type": "object", "properties": map[string]any{}}, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(schema, &fields); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if fields == nil {
		return nil, fmt.Errorf("not a JSON object: null")
	}
	out := make(shared.FunctionParameters, len(fields))
	for k, v := range fields {
		out[k] = v
	}
	return out, nil
}
