package agui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/chat"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// The ids of the messages the adapter streams are derived from the
// server's log, so that a later input's history can be held against it:
// the k-th model response of run R is the assistant message R.m<k>, the
// result of call C settled in run R the tool message R.t.<C>.
func responseID(runID string, k int) string    { return fmt.Sprintf("%s.m%d", runID, k) }
func resultID(runID, callID string) string     { return runID + ".t." + callID }
func interruptID(callID, digest string) string { return callID + ":" + digest }

// sent is a message the server streamed, as the client keeps it.
type sent struct {
	role       string
	content    string
	toolCalls  map[string]sentCall
	toolCallID string
}

type sentCall struct{ name, args string }

// transcript is what the server streamed of a conversation: its assistant
// and tool messages by id, the user prompts in order, and every tool call
// made.
type transcript struct {
	msgs    map[string]sent
	prompts []string
	calls   map[string]bool
	// results are the tool-return and retry parts of the history, by call
	// id: a frontend's own tool message, kept in its history beside the
	// server's result, must say what was recorded.
	results map[string]agent.Part
}

func transcriptOf(c *conversation.State) transcript {
	t := transcript{msgs: map[string]sent{}, calls: map[string]bool{}, results: map[string]agent.Part{}}
	responses := map[string]int{}
	for _, m := range c.History {
		switch m.Kind {
		case agent.KindResponse:
			k := responses[m.RunID]
			responses[m.RunID] = k + 1
			s := sent{role: "assistant", toolCalls: map[string]sentCall{}}
			for _, p := range m.Parts {
				switch p.Kind {
				case agent.PartText:
					s.content += p.Content
				case agent.PartToolCall:
					s.toolCalls[p.ToolCallID] = sentCall{name: p.ToolName, args: string(p.Args)}
					t.calls[p.ToolCallID] = true
				}
			}
			t.msgs[responseID(m.RunID, k)] = s
		case agent.KindRequest:
			for _, p := range m.Parts {
				if p.Kind == agent.PartToolReturn || p.Kind == agent.PartRetryPrompt {
					t.msgs[resultID(m.RunID, p.ToolCallID)] = sent{role: "tool", content: resultText(p), toolCallID: p.ToolCallID}
					t.results[p.ToolCallID] = p
				}
			}
		}
	}
	t.prompts = chat.Prompts(c)
	return t
}

// resultText is a tool message's content: a string result as itself,
// anything else as its JSON; a retry prompt's message.
func resultText(p agent.Part) string {
	if p.Kind == agent.PartRetryPrompt {
		return p.Content
	}
	var s string
	if json.Unmarshal(p.Value, &s) == nil {
		return s
	}
	if len(p.Value) == 0 {
		return p.Content
	}
	return string(p.Value)
}

// reading is what an input brings that the server did not send: the new
// user message and the tool messages answering frontend calls.
type reading struct {
	prompt  string
	answers []Message
}

// read holds the input's messages against the transcript t: messages the
// server sent must be as it sent them, the user messages before the new
// one must be the conversation's prompts, and any other message is a tool
// message answering one of frontend (the ids of the frontend calls the
// conversation waits for). System and developer messages are not read.
func read(msgs []Message, t transcript, frontend map[string]bool) (reading, error) {
	var (
		r     reading
		users []string
	)
	for _, m := range msgs {
		switch m.Role {
		case "system", "developer", "activity", "reasoning":
			continue
		case "user":
			text, err := textOf(m.Content)
			if err != nil {
				return r, fmt.Errorf("user message %s: %w", m.ID, err)
			}
			users = append(users, text)
			continue
		}
		s, known := t.msgs[m.ID]
		if known {
			if err := sameAsSent(m, s); err != nil {
				return r, err
			}
			continue
		}
		if m.Role != "tool" {
			return r, fmt.Errorf("%s message %s is not one the server sent", m.Role, m.ID)
		}
		if p, answered := t.results[m.ToolCallID]; answered && !frontend[m.ToolCallID] {
			// The frontend's earlier answer: not read again, but it must
			// be what was recorded.
			if !sameAnswer(m, p) {
				return r, fmt.Errorf("tool message %s is not the answer recorded for call %s: a past message was edited", m.ID, m.ToolCallID)
			}
			continue
		}
		if !frontend[m.ToolCallID] {
			return r, fmt.Errorf("tool message %s answers call %q, which the server did not ask the frontend to answer", m.ID, m.ToolCallID)
		}
		r.answers = append(r.answers, m)
	}
	isNew, err := chat.NewPrompt(users, t.prompts)
	if err != nil {
		return r, err
	}
	if n := len(t.prompts); isNew {
		r.prompt = users[n]
	}
	return r, nil
}

func sameAsSent(m Message, s sent) error {
	if m.Role != s.role {
		return fmt.Errorf("message %s is a %s message, the server sent a %s message", m.ID, m.Role, s.role)
	}
	text, err := textOf(m.Content)
	if err != nil {
		return fmt.Errorf("message %s: %w", m.ID, err)
	}
	if text != s.content {
		return fmt.Errorf("message %s is not as the server sent it: a past message was edited", m.ID)
	}
	if m.Role == "tool" {
		if m.ToolCallID != s.toolCallID {
			return fmt.Errorf("tool message %s is for call %q, the server sent it for %q", m.ID, m.ToolCallID, s.toolCallID)
		}
		return nil
	}
	if len(m.ToolCalls) != len(s.toolCalls) {
		return fmt.Errorf("message %s has %d tool calls, the server sent %d", m.ID, len(m.ToolCalls), len(s.toolCalls))
	}
	for _, tc := range m.ToolCalls {
		want, ok := s.toolCalls[tc.ID]
		if !ok || want.name != tc.Function.Name || !sameArgs(want.args, tc.Function.Arguments) {
			return fmt.Errorf("tool call %s of message %s is not as the server sent it", tc.ID, m.ID)
		}
	}
	return nil
}

func sameArgs(a, b string) bool {
	if strings.TrimSpace(b) == "" {
		b = "{}"
	}
	if strings.TrimSpace(a) == "" {
		a = "{}"
	}
	ca, err1 := deferred.CanonicalJSON(json.RawMessage(a))
	cb, err2 := deferred.CanonicalJSON(json.RawMessage(b))
	return err1 == nil && err2 == nil && bytes.Equal(ca, cb)
}

// textOf is a message's content as text: a string, or the text parts of a
// multimodal content list.
func textOf(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content: want a string or a list of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content: a %s part; only text is read", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// sameAnswer reports whether a frontend's tool message m says what the
// history recorded for its call (p): the same value, or the same retry or
// failure message.
func sameAnswer(m Message, p agent.Part) bool {
	res, err := orchestrator.ResultOf(answerJSON(m))
	if err != nil {
		return false
	}
	switch res.Outcome {
	case wire.OutcomeRetry:
		return p.Kind == agent.PartRetryPrompt && p.Content == res.Message
	case wire.OutcomeFailed:
		return p.Kind == agent.PartToolReturn && p.Outcome == agent.OutcomeFailed && resultText(p) == res.Message
	}
	return p.Kind == agent.PartToolReturn && sameArgs(string(p.Value), string(res.Value))
}

// answerJSON is a tool message's content as the result it gives: JSON as
// it is, any other text as a JSON string.
func answerJSON(m Message) json.RawMessage {
	text, _ := textOf(m.Content)
	raw := json.RawMessage(text)
	if !json.Valid(raw) {
		raw, _ = json.Marshal(text)
	}
	return raw
}
