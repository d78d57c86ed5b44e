package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Follow prints a conversation's events to w as they arrive and returns the
// conversation once it is completed or failed (or ctx ends).
func (c *Client) Follow(ctx context.Context, conversationID string, w io.Writer) (*Conversation, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range c.Events(ctx, conversationID, "") {
			if err != nil {
				fmt.Fprintf(w, "events: %v\n", err)
				return
			}
			fmt.Fprintln(w, EventLine(ev))
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
	var e struct {
		Type       string          `json:"type"`
		RunID      string          `json:"run_id"`
		ToolCallID string          `json:"tool_call_id"`
		Data       json.RawMessage `json:"data"`
	}
	if json.Unmarshal([]byte(ev.Data), &e) != nil || e.Type == "" {
		return fmt.Sprintf("event %-18s %s", ev.Event, truncate(ev.Data, 160))
	}
	line := fmt.Sprintf("event %-18s", e.Type)
	if e.ToolCallID != "" {
		line += " [" + e.ToolCallID + "]"
	}
	if len(e.Data) > 0 && string(e.Data) != "null" {
		line += " " + truncate(compact(e.Data), 160)
	}
	return line
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
