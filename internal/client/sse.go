package client

import (
	"bufio"
	"context"
	"iter"
	"net/http"
	"net/url"
	"strings"

	"github.com/toolgate/toolgate/internal/sse"
)

// Events follows a conversation's event stream from the start (or after
// lastID), each event as the server wrote it. The sequence ends when ctx
// ends or the server closes the stream.
func (c *Client) Events(ctx context.Context, conversationID, lastID string) iter.Seq2[SSE, error] {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		strings.TrimRight(c.BaseURL, "/")+"/v1/conversations/"+url.PathEscape(conversationID)+"/events", nil)
	if err != nil {
		return func(yield func(SSE, error) bool) { yield(SSE{}, err) }
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	return sse.Follow(c.httpClient(), req, func(status int) error {
		return &APIError{Status: status, Message: "event stream refused"}
	})
}

// ReadSSE parses a text/event-stream body.
func ReadSSE(r *bufio.Reader) iter.Seq2[SSE, error] { return sse.Read(r) }
