package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"

	oai "github.com/openai/openai-go/v3"

	"github.com/toolgate/toolgate/internal/agent"
)

func (m *Model) fromCompletion(c *oai.ChatCompletion) (agent.ModelResponse, error) {
	if c == nil || len(c.Choices) == 0 {
		return agent.ModelResponse{}, errors.New("answer has no choices")
	}
	choice := c.Choices[0]
	msg := choice.Message
	text := msg.Content
	if text == "" {
		// A refusal is the model's answer, so the loop should see it as text.
		text = msg.Refusal
	}
	calls := make([]toolCall, 0, len(msg.ToolCalls))
	for _, tc := range msg.ToolCalls {
		// Function is read regardless of Type: some servers omit "type".
		calls = append(calls, toolCall{id: tc.ID, name: tc.Function.Name, args: tc.Function.Arguments})
	}
	m.noteFinish(choice.FinishReason)
	return agent.ModelResponse{
		Parts:     parts(text, calls),
		ModelName: c.Model,
		Usage:     agent.Usage{InputTokens: c.Usage.PromptTokens, OutputTokens: c.Usage.CompletionTokens},
	}, nil
}

// noteFinish warns about answers the server cut short: the loop gets what was
// produced, but a truncated tool call usually fails validation next.
func (m *Model) noteFinish(reason string) {
	if reason == "length" || reason == "content_filter" {
		m.log.Warn("chat completion cut short", slog.String("finish_reason", reason))
	}
}

type toolCall struct {
	id, name, args string
}

func parts(text string, calls []toolCall) []agent.Part {
	var out []agent.Part
	if text != "" {
		out = append(out, agent.Part{Kind: agent.PartText, Content: text})
	}
	for _, c := range calls {
		out = append(out, agent.Part{
			Kind:       agent.PartToolCall,
			ToolName:   c.name,
			ToolCallID: c.id,
			Args:       toolCallArgs(c.args),
		})
	}
	return out
}

// toolCallArgs turns the model's arguments text into the part's Args. Text
// that is not JSON is wrapped in a JSON string: the part must stay valid JSON
// to be stored, and a string is not the object the loop's validation expects,
// so the model is asked to retry instead of the run failing.
func toolCallArgs(s string) json.RawMessage {
	b := bytes.TrimSpace([]byte(s))
	if len(b) == 0 {
		return json.RawMessage(emptyArguments)
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	quoted, _ := json.Marshal(s) // a string always marshals
	return quoted
}
