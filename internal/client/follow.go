package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// Follow prints a conversation's events to w as they arrive and returns the
// conversation once it is completed or failed (or ctx ends). A broken
// event stream is told on errw, not among the events.
func (c *Client) Follow(ctx context.Context, conversationID string, w, errw io.Writer) (*Conversation, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	var r Renderer
	go func() {
		defer close(done)
		for ev, err := range c.Events(ctx, conversationID, "") {
			if err != nil {
				if ctx.Err() == nil {
					fmt.Fprintf(errw, "events: %v\n", err)
				}
				return
			}
			fmt.Fprint(w, r.Render(ev))
		}
	}()
	conv, err := c.WaitTerminal(ctx, conversationID, 150*time.Millisecond)
	// Let the stream catch up with the last events before closing it.
	grace := time.NewTimer(300 * time.Millisecond)
	select {
	case <-done:
	case <-grace.C:
	}
	grace.Stop()
	cancel()
	<-done
	return conv, err
}

// EventLine renders one event as a line for a terminal.
func EventLine(ev SSE) string {
	var r Renderer
	return strings.TrimSuffix(r.Render(ev), "\n")
}

// Renderer turns a conversation's events into terminal lines; it runs text
// deltas together on one line.
type Renderer struct{ inText bool }

type eventData struct {
	Type       string          `json:"type"`
	RunID      string          `json:"run_id"`
	ToolCallID string          `json:"tool_call_id"`
	Data       json.RawMessage `json:"data"`
}

type agentEventData struct {
	Delta string `json:"delta"`
	Part  *struct {
		ToolName string          `json:"tool_name"`
		Args     json.RawMessage `json:"args"`
		Value    json.RawMessage `json:"value"`
		Content  string          `json:"content"`
		Outcome  string          `json:"outcome"`
		Kind     string          `json:"part_kind"`
	} `json:"part"`
	Requests *struct {
		Calls []struct {
			ToolCallID string `json:"tool_call_id"`
		} `json:"calls"`
		Approvals []struct {
			ToolCallID string `json:"tool_call_id"`
		} `json:"approvals"`
	} `json:"requests"`
	Output string `json:"output"`
	Error  string `json:"error"`
	Kind   string `json:"kind"`
	Resume bool   `json:"resume"`
	Reason string `json:"reason"`
}

// Render returns the text to print for ev (possibly several lines, or a
// fragment of one while text streams).
func (r *Renderer) Render(ev SSE) string {
	var e eventData
	if json.Unmarshal([]byte(ev.Data), &e) != nil || e.Type == "" {
		return r.line(fmt.Sprintf("· %s %s", ev.Event, truncate(ev.Data, 160)))
	}
	var d agentEventData
	_ = json.Unmarshal(e.Data, &d) // unknown shapes still print their type
	id := ""
	if e.ToolCallID != "" {
		id = "  [" + e.ToolCallID + "]"
	}
	switch e.Type {
	case wire.EventTextDelta:
		prefix := ""
		if !r.inText {
			prefix = "  model  │ "
			r.inText = true
		}
		return prefix + strings.ReplaceAll(d.Delta, "\n", "\n         │ ")
	case wire.EventModelResponse, wire.EventRunDone:
		return r.flush()
	case wire.EventRunStarted:
		what := "run started"
		if d.Resume {
			what = "follow-up run started"
		}
		return r.line(fmt.Sprintf("▷ %s %s", what, e.RunID))
	case wire.EventToolCall:
		if d.Part != nil {
			return r.line(fmt.Sprintf("  call   │ %s(%s)%s", d.Part.ToolName, truncate(compact(d.Part.Args), 100), id))
		}
	case wire.EventToolResult:
		if d.Part != nil {
			if d.Part.Kind == "retry-prompt" {
				return r.line(fmt.Sprintf("  retry  │ %s: %s%s", d.Part.ToolName, truncate(d.Part.Content, 100), id))
			}
			outcome := d.Part.Outcome
			if outcome == "" {
				outcome = "success"
			}
			return r.line(fmt.Sprintf("  result │ %s %s: %s%s", d.Part.ToolName, outcome, truncate(contentText(d.Part.Value), 100), id))
		}
	case wire.EventDeferredRequests:
		if d.Requests != nil {
			return r.line(fmt.Sprintf("⏸ deferred: approvals %v, calls %v", ids(d.Requests.Approvals), ids(d.Requests.Calls)))
		}
	case wire.EventRunPaused:
		return r.line("⏸ run paused " + e.RunID + ": waiting for approvers and workers")
	case wire.EventReplyApplied:
		return r.line(fmt.Sprintf("✓ reply (%s)%s", d.Kind, id))
	case wire.EventCallsExpired:
		return r.line("⌛ expired" + id)
	case wire.EventToolUnserved, wire.EventAgentUnavailable:
		return r.line("⚠ " + d.Reason + id)
	case wire.EventConversationCancelled:
		return r.line("✗ cancelled")
	case wire.EventRunCompleted:
		return r.line("■ completed")
	case wire.EventRunFailed:
		return r.line("✗ failed: " + d.Error)
	}
	return r.line(fmt.Sprintf("· %s%s", e.Type, id))
}

func (r *Renderer) flush() string {
	if r.inText {
		r.inText = false
		return "\n"
	}
	return ""
}

func (r *Renderer) line(s string) string { return r.flush() + s + "\n" }

func ids(calls []struct {
	ToolCallID string `json:"tool_call_id"`
}) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.ToolCallID
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
