// Package client drives toolgate conversations from Go through the
// orchestrator's HTTP API: start a run (idempotently), read a
// conversation, follow its events as they happen, list the calls waiting
// for approvers and workers, cancel, wait for a status, and list and
// delete conversations.
//
//	c, _ := client.New(client.Config{BaseURL: "http://127.0.0.1:8080"})
//	run, _ := c.Start(ctx, client.StartRequest{Prompt: "What is the weather in Paris?"})
//	for ev, err := range c.Events(ctx, run.ConversationID, "") { … }
//	conv, _ := c.Wait(ctx, run.ConversationID)
//
// It speaks only HTTP: it links neither NATS nor the orchestrator. The
// toolgate command is built on it.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/sse"
	"github.com/toolgate/toolgate/wire"
)

// Statuses of a conversation.
const (
	StatusRunning   = "running"
	StatusPaused    = "paused"   // waiting for approvers or workers
	StatusResuming  = "resuming" // its calls are answered; the follow-up run is starting
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
	// StatusQueued is a run's, not a conversation's: a prompt given while
	// its conversation was paused, waiting for the batch's results.
	StatusQueued = "queued"
)

// Run is the answer to a start: the run and its conversation.
type Run struct {
	RunID          string `json:"run_id"`
	ConversationID string `json:"conversation_id"`
	// Status is the run's: "running", or "queued" for a prompt given while
	// its conversation was paused (Conversation.QueuedPrompt).
	Status string `json:"status"`
}

// Conversation is a conversation as the orchestrator shows it
// (GET /v1/conversations/{id}).
type Conversation struct {
	ConversationID string `json:"conversation_id"`
	// Status is one of the Status constants.
	Status string `json:"status"`
	// Output is the final answer of a completed conversation, as JSON (a
	// string for text output); Error says why a failed one failed.
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Agent is the agent the conversation runs with, AgentDigest the
	// digest of its config; Unserved says why no replica runs it now.
	Agent       string `json:"agent,omitempty"`
	AgentDigest string `json:"agent_digest,omitempty"`
	// Caller is what the application said of who gave the latest prompt
	// (StartRequest.Caller).
	Caller   json.RawMessage `json:"caller,omitempty"`
	Unserved string          `json:"unserved,omitempty"`
	// Runs are the conversation's runs, oldest first.
	Runs []Run `json:"runs"`
	// Pending are the deferred calls waiting for approvers or workers.
	Pending []PendingCall `json:"pending"`
	// Messages is the history, oldest first, each message a JSON object
	// (docs/protocol.md).
	Messages []json.RawMessage `json:"messages"`
	// QueuedPrompt is a prompt given while the conversation was paused,
	// waiting for the batch to be answered; nil when there is none.
	QueuedPrompt *QueuedPrompt `json:"queued_prompt,omitempty"`
}

// Terminal reports whether the conversation has stopped for good (until a
// new prompt continues it): completed, failed or cancelled.
func (c *Conversation) Terminal() bool {
	return c.Status == StatusCompleted || c.Status == StatusFailed || c.Status == StatusCancelled
}

// QueuedPrompt is a prompt given while a conversation was paused, and the
// run (status "queued") that sends it once the batch is answered.
type QueuedPrompt struct {
	RunID  string `json:"run_id"`
	Prompt string `json:"prompt"`
}

// PendingCall is a deferred call waiting for its reply. Its type is the
// wire contract's, which workers and approvers read too.
type PendingCall = wire.PendingCall

// Event is one event of a conversation, with the ID to resume after it.
type Event struct {
	// ID resumes the stream after this event (Events' after).
	ID string
	wire.Event
}

// Config configures a Client.
type Config struct {
	// BaseURL of the orchestrator, e.g. "http://127.0.0.1:8080". Required.
	BaseURL string
	// Token, when set, is sent as a bearer token.
	Token string
	// HTTP defaults to a client without a timeout (event streams are long).
	HTTP *http.Client
}

// Client talks to an orchestrator. It is safe for concurrent use.
type Client struct {
	baseURL string // without a trailing slash
	token   string
	http    *http.Client
}

// New returns a client for cfg.BaseURL.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host[:port]", cfg.BaseURL)
	}
	return &Client{baseURL: strings.TrimRight(cfg.BaseURL, "/"), token: cfg.Token, http: cfg.HTTP}, nil
}

// BaseURL is the orchestrator's URL the client was made for.
func (c *Client) BaseURL() string { return c.baseURL }

// StartRequest starts a run.
type StartRequest struct {
	// Prompt is the user's message. Required.
	Prompt string
	// ConversationID continues a conversation; empty starts a new one.
	ConversationID string
	// NewConversationID, when set, is the id of the new conversation,
	// chosen by the caller: "c" then 1 to 127 letters and digits (400
	// otherwise, or with ConversationID). An id a conversation has already
	// is refused with 409, unless this is the repeat of the start that
	// made it (the same IdempotencyKey and Prompt).
	NewConversationID string
	// Agent names the agent of a new conversation; empty is the only one
	// the orchestrators run (400 when they run several). A follow-up may
	// name only its conversation's own agent (409 otherwise).
	Agent string
	// IdempotencyKey makes the start safe to repeat: the same key answers
	// with the run it first started, from any replica. Empty: a fresh key
	// per call, which still makes the client's own retries safe.
	IdempotencyKey string
	// Caller says who gives the prompt, as a JSON object (a user id, a
	// role, a tenant; at most 4 KiB): the conversation keeps the latest
	// prompt's, and the agent's tools and approval rules see it as
	// RunContext.Caller (package agenttool). It is passed on as given.
	Caller json.RawMessage
}

// Start starts a run. Lost connections and 5xx answers are retried under
// the same idempotency key.
func (c *Client) Start(ctx context.Context, r StartRequest) (Run, error) {
	if r.Prompt == "" {
		return Run{}, errors.New("client: start: prompt is empty")
	}
	body := map[string]any{"prompt": r.Prompt}
	if r.ConversationID != "" {
		body["conversation_id"] = r.ConversationID
	}
	if r.Agent != "" {
		body["agent"] = r.Agent
	}
	if r.NewConversationID != "" {
		body["new_conversation_id"] = r.NewConversationID
	}
	if len(r.Caller) > 0 {
		body["caller"] = r.Caller
	}
	key := r.IdempotencyKey
	if key == "" {
		key = newKey()
	}
	return c.start(ctx, body, key)
}

// Conversation reads a conversation.
func (c *Client) Conversation(ctx context.Context, id string) (*Conversation, error) {
	var conv Conversation
	if err := c.do(ctx, http.MethodGet, "/v1/conversations/"+url.PathEscape(id), nil, &conv); err != nil {
		return nil, err
	}
	return &conv, nil
}

// Pending lists the calls waiting for a reply, of every conversation.
func (c *Client) Pending(ctx context.Context) ([]PendingCall, error) {
	var out struct {
		Pending []PendingCall `json:"pending"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/pending", nil, &out)
	return out.Pending, err
}

// Events follows a conversation's events from the first kept (after "")
// or after the event with ID after, as they happen, until ctx ends or the
// caller stops. An event the client cannot read is yielded as an error,
// and the sequence goes on.
func (c *Client) Events(ctx context.Context, id, after string) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for sse, err := range c.events(ctx, id, after) {
			if err != nil {
				yield(Event{}, err)
				return
			}
			var ev wire.Event
			if err := json.Unmarshal([]byte(sse.Data), &ev); err != nil {
				if !yield(Event{ID: sse.ID}, fmt.Errorf("client: event %s: %w", sse.ID, err)) {
					return
				}
				continue
			}
			if !yield(Event{ID: sse.ID, Event: ev}, nil) {
				return
			}
		}
	}
}

// events yields the conversation's event stream as it comes, until ctx
// ends or the server closes it.
func (c *Client) events(ctx context.Context, id, after string) iter.Seq2[sse.Event, error] {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.baseURL+"/v1/conversations/"+url.PathEscape(id)+"/events", nil)
	if err != nil {
		return func(yield func(sse.Event, error) bool) { yield(sse.Event{}, err) }
	}
	if after != "" {
		req.Header.Set("Last-Event-ID", after)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return sse.Follow(c.httpClient(), req, func(status int) error {
		return &APIError{Status: status, Message: "event stream refused"}
	})
}

// Wait polls the conversation until its status is one of statuses
// (default: completed, failed or cancelled) and returns it; it returns the
// last state read and an error when ctx ends first.
func (c *Client) Wait(ctx context.Context, id string, statuses ...string) (*Conversation, error) {
	if len(statuses) == 0 {
		statuses = []string{StatusCompleted, StatusFailed, StatusCancelled}
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		conv, err := c.Conversation(ctx, id)
		if err == nil && slices.Contains(statuses, conv.Status) {
			return conv, nil
		}
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.Status != http.StatusNotFound && apiErr.Status < 500 {
			return nil, err
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("conversation %s is %s, not %v", id, conv.Status, statuses)
			}
			return conv, errors.Join(ctx.Err(), err)
		case <-t.C:
		}
	}
}
