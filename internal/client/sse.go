package client

import (
	"bufio"
	"context"
	"fmt"
	"iter"
	"net/http"
	"strings"
)

// SSE is one Server-Sent Event.
type SSE struct {
	ID    string
	Event string
	Data  string
}

// Events follows a conversation's event stream from the start (or after
// lastID). The sequence ends when ctx ends or the server closes the stream.
func (c *Client) Events(ctx context.Context, conversationID, lastID string) iter.Seq2[SSE, error] {
	return func(yield func(SSE, error) bool) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			strings.TrimRight(c.BaseURL, "/")+"/v1/conversations/"+conversationID+"/events", nil)
		if err != nil {
			yield(SSE{}, err)
			return
		}
		req.Header.Set("Accept", "text/event-stream")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		if c.Token != "" {
			req.Header.Set("Authorization", "Bearer "+c.Token)
		}
		resp, err := c.httpClient().Do(req)
		if err != nil {
			if ctx.Err() == nil {
				yield(SSE{}, err)
			}
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			yield(SSE{}, &APIError{Status: resp.StatusCode, Message: "event stream refused"})
			return
		}
		for ev, err := range ReadSSE(bufio.NewReader(resp.Body)) {
			if err != nil && ctx.Err() != nil {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}

// ReadSSE parses a text/event-stream body.
func ReadSSE(r *bufio.Reader) iter.Seq2[SSE, error] {
	return func(yield func(SSE, error) bool) {
		var ev SSE
		var data []string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				if line == "" {
					return
				}
				yield(SSE{}, fmt.Errorf("event stream: %w", err))
				return
			}
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "":
				if len(data) > 0 || ev.Event != "" {
					ev.Data = strings.Join(data, "\n")
					if !yield(ev, nil) {
						return
					}
				}
				ev, data = SSE{}, nil
			case strings.HasPrefix(line, ":"):
			default:
				field, value, _ := strings.Cut(line, ":")
				value = strings.TrimPrefix(value, " ")
				switch field {
				case "id":
					ev.ID = value
				case "event":
					ev.Event = value
				case "data":
					data = append(data, value)
				}
			}
		}
	}
}
