package api

import (
	"encoding/json"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/conversation"
)

// The JSON shape of history in the HTTP API: the MESSAGE/PART shape of the
// conformance scenarios, so that a client can compare a conversation with a
// scenario's expected messages. A retry part carries its message in full.

type messageJSON struct {
	// Pointers, so that an empty message still says which kind it is
	// ({"response": []}): omitempty drops an empty slice but not a pointer
	// to one.
	Request  *[]partJSON `json:"request,omitempty"`
	Response *[]partJSON `json:"response,omitempty"`
}

type partJSON struct {
	System string      `json:"system,omitempty"`
	User   *string     `json:"user,omitempty"`
	Text   *string     `json:"text,omitempty"`
	Call   *callJSON   `json:"call,omitempty"`
	Return *returnJSON `json:"return,omitempty"`
	Retry  *retryJSON  `json:"retry,omitempty"`
}

type callJSON struct {
	Tool string          `json:"tool"`
	ID   string          `json:"id"`
	Args json.RawMessage `json:"args"`
	// OriginalArgs are the model's args of a call approved with other
	// args, which Args then shows (D24).
	OriginalArgs json.RawMessage `json:"original_args,omitempty"`
}

type returnJSON struct {
	Tool     string          `json:"tool"`
	ID       string          `json:"id"`
	Content  json.RawMessage `json:"content"`
	Outcome  string          `json:"outcome"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

type retryJSON struct {
	Tool    string `json:"tool,omitempty"`
	ID      string `json:"id,omitempty"`
	Message string `json:"message"`
}

// messagesJSON renders history in the conformance MESSAGE shape. A call
// that decisions approved with other args than the model's shows the args
// it ran with, and the model's as original_args: the history keeps the
// model's (D24), which is what the model reads.
func messagesJSON(history []agent.Message, decisions []conversation.DecisionRecord) []json.RawMessage {
	var edited map[[2]string]json.RawMessage
	for _, d := range decisions {
		if d.Approved && len(d.OverrideArgs) > 0 && json.Valid(d.OverrideArgs) {
			if edited == nil {
				edited = map[[2]string]json.RawMessage{}
			}
			edited[[2]string{d.RunID, d.ToolCallID}] = d.OverrideArgs
		}
	}
	out := make([]json.RawMessage, 0, len(history))
	for _, m := range history {
		parts := make([]partJSON, 0, len(m.Parts))
		for _, p := range m.Parts {
			if pj, ok := partToJSON(p); ok {
				if args, ok := edited[[2]string{m.RunID, p.ToolCallID}]; ok && pj.Call != nil {
					pj.Call.OriginalArgs, pj.Call.Args = pj.Call.Args, args
				}
				parts = append(parts, pj)
			}
		}
		var mj messageJSON
		if parts == nil {
			parts = []partJSON{}
		}
		if m.Kind == agent.KindResponse {
			mj.Response = &parts
		} else {
			mj.Request = &parts
		}
		b, err := json.Marshal(mj)
		if err != nil {
			continue // raw values were validated when they entered history
		}
		out = append(out, b)
	}
	return out
}

func partToJSON(p agent.Part) (partJSON, bool) {
	switch p.Kind {
	case agent.PartSystemPrompt:
		return partJSON{System: p.Content}, true
	case agent.PartUserPrompt:
		s := p.Content
		return partJSON{User: &s}, true
	case agent.PartText:
		s := p.Content
		return partJSON{Text: &s}, true
	case agent.PartToolCall:
		args := p.Args
		if !json.Valid(args) {
			args = json.RawMessage("{}")
		}
		return partJSON{Call: &callJSON{Tool: p.ToolName, ID: p.ToolCallID, Args: args}}, true
	case agent.PartToolReturn:
		content := p.Value
		if len(content) == 0 || !json.Valid(content) {
			b, _ := json.Marshal(p.Content)
			content = b
		}
		outcome := string(p.Outcome)
		if outcome == "" {
			outcome = string(agent.OutcomeSuccess)
		}
		meta := p.Metadata
		if len(meta) > 0 && !json.Valid(meta) {
			meta = nil
		}
		return partJSON{Return: &returnJSON{Tool: p.ToolName, ID: p.ToolCallID, Content: content, Outcome: outcome, Metadata: meta}}, true
	case agent.PartRetryPrompt:
		return partJSON{Retry: &retryJSON{Tool: p.ToolName, ID: p.ToolCallID, Message: p.Content}}, true
	}
	return partJSON{}, false
}
