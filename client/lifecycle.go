package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Delete deletes a finished conversation (its state, history and events;
// its audit records stay). One under way is an *APIError with status 409.
func (c *Client) Delete(ctx context.Context, conversationID string) error {
	return c.do(ctx, http.MethodDelete, "/v1/conversations/"+url.PathEscape(conversationID), nil, nil)
}

// ListOptions selects a page of conversations.
type ListOptions struct {
	// Status keeps only conversations in it; empty keeps all.
	Status string
	// Limit is the page size; 0 is the orchestrator's default (100), and
	// it allows at most 1,000.
	Limit int
	// Cursor is the previous page's NextCursor; empty starts at the first.
	Cursor string
}

// ConversationSummary is a conversation as a list shows it.
type ConversationSummary struct {
	ConversationID string    `json:"conversation_id"`
	Status         string    `json:"status"`
	Agent          string    `json:"agent,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// ConversationPage is a page of conversations: in the order they were
// created, or in id order with a status of conversations under way
// (running, paused, resuming). A page may hold fewer than the limit, even
// none, and still have a NextCursor: go on until it is empty.
type ConversationPage struct {
	Conversations []ConversationSummary `json:"conversations"`
	// NextCursor asks for the next page; empty after the last.
	NextCursor string `json:"next_cursor,omitempty"`
}

// List returns a page of conversations.
func (c *Client) List(ctx context.Context, opts ListOptions) (ConversationPage, error) {
	q := url.Values{}
	if opts.Status != "" {
		q.Set("status", opts.Status)
	}
	if opts.Limit != 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	path := "/v1/conversations"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out ConversationPage
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// Conversations yields every conversation in status (empty: all), as List
// orders them, a page at a time, until the last page or the caller stops;
// an error ends the sequence. Pages may be short, even empty, before the
// last: only an empty NextCursor ends it.
func (c *Client) Conversations(ctx context.Context, status string) iter.Seq2[ConversationSummary, error] {
	return func(yield func(ConversationSummary, error) bool) {
		opts := ListOptions{Status: status}
		for {
			page, err := c.List(ctx, opts)
			if err != nil {
				yield(ConversationSummary{}, err)
				return
			}
			for _, s := range page.Conversations {
				if !yield(s, nil) {
					return
				}
			}
			if page.NextCursor == "" {
				return
			}
			opts.Cursor = page.NextCursor
		}
	}
}
