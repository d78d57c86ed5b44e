package client

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Part is a message part in the orchestrator's MESSAGE/PART JSON shape
// (the conformance format): exactly one key is set.
type Part struct {
	User   *string `json:"user"`
	Text   *string `json:"text"`
	System *string `json:"system"`
	Call   *struct {
		Tool string          `json:"tool"`
		ID   string          `json:"id"`
		Args json.RawMessage `json:"args"`
		// OriginalArgs are the model's args of a call approved with
		// others (Args).
		OriginalArgs json.RawMessage `json:"original_args"`
	} `json:"call"`
	Return *struct {
		Tool     string          `json:"tool"`
		ID       string          `json:"id"`
		Content  json.RawMessage `json:"content"`
		Outcome  string          `json:"outcome"`
		Metadata json.RawMessage `json:"metadata"`
	} `json:"return"`
	Retry *struct {
		Tool     string `json:"tool"`
		ID       string `json:"id"`
		Message  string `json:"message"`
		Contains string `json:"contains"`
	} `json:"retry"`
}

// WriteTranscript renders messages as a readable chat transcript.
func WriteTranscript(w io.Writer, messages []json.RawMessage) error {
	for i, raw := range messages {
		var m map[string][]Part
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("message %d: %w", i, err)
		}
		for role, parts := range m {
			for _, p := range parts {
				if line := partLine(role, p); line != "" {
					if _, err := fmt.Fprintln(w, line); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func partLine(role string, p Part) string {
	switch {
	case p.User != nil:
		return "user      │ " + indent(*p.User)
	case p.System != nil:
		return "system    │ " + indent(*p.System)
	case p.Text != nil:
		return "assistant │ " + indent(*p.Text)
	case p.Call != nil && len(p.Call.OriginalArgs) > 0:
		return fmt.Sprintf("assistant │ → %s(%s)  [%s]  approved with edited args; the model asked %s", p.Call.Tool, compact(p.Call.Args), p.Call.ID, compact(p.Call.OriginalArgs))
	case p.Call != nil:
		return fmt.Sprintf("assistant │ → %s(%s)  [%s]", p.Call.Tool, compact(p.Call.Args), p.Call.ID)
	case p.Return != nil:
		outcome := p.Return.Outcome
		if outcome == "" {
			outcome = "success"
		}
		return fmt.Sprintf("tool      │ ← %s %s: %s  [%s]", p.Return.Tool, outcome, contentText(p.Return.Content), p.Return.ID)
	case p.Retry != nil:
		msg := p.Retry.Message
		if msg == "" {
			msg = p.Retry.Contains
		}
		return fmt.Sprintf("tool      │ ↺ %s retry: %s  [%s]", p.Retry.Tool, indent(msg), p.Retry.ID)
	}
	return ""
}

func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return indent(s)
	}
	return compact(raw)
}

func compact(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n          │ ") }
