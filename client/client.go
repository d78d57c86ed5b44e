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
// It wraps internal/client, which the toolgate command and the project's
// own tests use, and speaks only HTTP: it links neither NATS nor the
// orchestrator.
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
	"time"

	iclient "github.com/toolgate/toolgate/internal/client"
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

type (
	// Run is the answer to a start: the run and its conversation.
	Run = iclient.RunStatus
	// Conversation is a conversation as the orchestrator shows it: its
	// status, output or error, runs, pending calls and messages.
	Conversation = iclient.Conversation
	// PendingCall is a deferred call waiting for its reply.
	PendingCall = wire.PendingCall
	// APIError is an answer other than 2xx.
	APIError = iclient.APIError
	// ListOptions selects a page of conversations: a status (empty: all),
	// a page size (0: the orchestrator's default, 100; at most 1,000) and
	// the previous page's NextCursor.
	ListOptions = iclient.ListOptions
	// ConversationPage is a page of conversations. A page may hold fewer
	// than asked for, even none, and still have a NextCursor.
	ConversationPage = iclient.ConversationPage
	// ConversationSummary is a conversation as a list shows it: its id,
	// status, agent and times.
	ConversationSummary = iclient.ConversationSummary
	// QueuedPrompt is a prompt given while a conversation was paused, and
	// the run that sends it once the batch is answered.
	QueuedPrompt = iclient.QueuedPrompt
	// RecordOptions selects a page of dead letters or audit records,
	// newest first: by conversation, tool call and time (Since: an RFC
	// 3339 time or a duration back from now, "24h"), a page size and the
	// previous page's NextCursor.
	RecordOptions = iclient.RecordOptions
	// DeadLetterPage is a page of dead letters (GET /v1/dlq), AuditPage
	// one of audit records (GET /v1/audit), newest first; NextCursor asks
	// for the older ones.
	DeadLetterPage = iclient.DeadLetterPage
	AuditPage      = iclient.AuditPage
	// DeadLetter is a message that could not be handled; AuditRecord a
	// decision or refused result as the audit stream keeps it.
	DeadLetter  = iclient.DeadLetter
	AuditRecord = iclient.AuditRecord
)

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
type Client struct{ c iclient.Client }

// New returns a client for cfg.BaseURL.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http(s)://host[:port]", cfg.BaseURL)
	}
	return &Client{c: iclient.Client{BaseURL: cfg.BaseURL, Token: cfg.Token, HTTP: cfg.HTTP}}, nil
}

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
	return c.c.Start(ctx, iclient.StartOptions{Prompt: r.Prompt, ConversationID: r.ConversationID, NewConversationID: r.NewConversationID, Agent: r.Agent, Key: r.IdempotencyKey, Caller: r.Caller})
}

// Conversation reads a conversation.
func (c *Client) Conversation(ctx context.Context, id string) (*Conversation, error) {
	return c.c.Conversation(ctx, id)
}

// Pending lists the calls waiting for a reply, of every conversation.
func (c *Client) Pending(ctx context.Context) ([]PendingCall, error) { return c.c.Pending(ctx) }

// Cancel cancels a conversation: its pending calls are settled and no
// further run starts.
func (c *Client) Cancel(ctx context.Context, id string) error { return c.c.Cancel(ctx, id) }

// List returns a page of conversations: in the order they were created,
// or in id order with a status of conversations under way (running,
// paused, resuming). Conversations goes through every page.
func (c *Client) List(ctx context.Context, opts ListOptions) (ConversationPage, error) {
	return c.c.List(ctx, opts)
}

// Conversations yields every conversation in status (empty: all), as List
// orders them, a page at a time, until the last page or the caller stops.
// An error ends the sequence.
func (c *Client) Conversations(ctx context.Context, status string) iter.Seq2[ConversationSummary, error] {
	return c.c.Conversations(ctx, status)
}

// Delete deletes a finished conversation: its state, history and events
// (its audit records stay). One under way is an *APIError with status
// 409: cancel it first.
func (c *Client) Delete(ctx context.Context, id string) error { return c.c.Delete(ctx, id) }

// DeadLetters returns a page of the dead letters, newest first.
func (c *Client) DeadLetters(ctx context.Context, opts RecordOptions) (DeadLetterPage, error) {
	return c.c.DeadLetters(ctx, opts)
}

// Audit returns a page of the audit records, newest first.
func (c *Client) Audit(ctx context.Context, opts RecordOptions) (AuditPage, error) {
	return c.c.Audit(ctx, opts)
}

// Events follows a conversation's events from the first kept (after "")
// or after the event with ID after, as they happen, until ctx ends or the
// caller stops. An event the client cannot read is yielded as an error,
// and the sequence goes on.
func (c *Client) Events(ctx context.Context, id, after string) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for sse, err := range c.c.Events(ctx, id, after) {
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
		conv, err := c.c.Conversation(ctx, id)
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
