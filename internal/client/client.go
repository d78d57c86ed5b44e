// Package client is what the toolgate command and the project's tests add
// to the public package client: the start options the command's flags map
// to, waits on /healthz, the raw event stream and its rendering on a
// terminal. The HTTP API itself, and every type it answers with, is the
// public package's.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"
	"time"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/sse"
	"github.com/toolgate/toolgate/wire"
)

// The API's types are the public client's.
type (
	RunStatus           = client.Run
	Conversation        = client.Conversation
	QueuedPrompt        = client.QueuedPrompt
	APIError            = client.APIError
	ListOptions         = client.ListOptions
	ConversationSummary = client.ConversationSummary
	ConversationPage    = client.ConversationPage
	RecordOptions       = client.RecordOptions
	DeadLetter          = client.DeadLetter
	DeadLetterPage      = client.DeadLetterPage
	AuditRecord         = client.AuditRecord
	AuditPage           = client.AuditPage
	GrantOptions        = client.GrantOptions
	Grant               = client.Grant
	// Pending is one deferred call waiting for a reply.
	Pending = wire.PendingCall
	// SSE is one Server-Sent Event.
	SSE = sse.Event
)

// Client is an orchestrator API client. The zero value is not usable: set
// BaseURL.
type Client struct {
	// BaseURL of the orchestrator, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// Token, when set, is sent as a bearer token.
	Token string
	// HTTP defaults to a client without a timeout (event streams are long).
	HTTP *http.Client
}

// api is the public client for c's settings.
func (c *Client) api() (*client.Client, error) {
	return client.New(client.Config{BaseURL: c.BaseURL, Token: c.Token, HTTP: c.HTTP})
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// StartRun submits a prompt; an empty conversationID starts a new
// conversation. It is safe against lost answers: the request carries a
// fresh Idempotency-Key and is tried again with the same key when the
// connection fails or the orchestrator answers 500, 502, 503 or 504, so a
// start that happened but whose answer was lost is answered, not repeated.
func (c *Client) StartRun(ctx context.Context, prompt, conversationID string) (RunStatus, error) {
	return c.Start(ctx, StartOptions{Prompt: prompt, ConversationID: conversationID})
}

// StartRunKey is StartRun under the caller's idempotency key: a start
// repeated with the same key, by this process or another, answers with the
// run the first one started; the same key with another prompt is refused
// (422).
func (c *Client) StartRunKey(ctx context.Context, prompt, conversationID, key string) (RunStatus, error) {
	return c.Start(ctx, StartOptions{Prompt: prompt, ConversationID: conversationID, Key: key})
}

// StartOptions is a start: the prompt, the conversation it continues (""
// starts one), the agent of a new conversation ("" is the only one there
// is), and the idempotency key ("" is a fresh one).
type StartOptions struct {
	Prompt, ConversationID, Agent, Key string
	// NewConversationID is the id of the new conversation, chosen by the
	// caller ("c" then letters and digits); "" lets the orchestrator choose.
	NewConversationID string
	// Caller, a JSON object, says who gives the prompt (the API's caller).
	Caller json.RawMessage
}

// Start is StartRun with every option.
func (c *Client) Start(ctx context.Context, o StartOptions) (RunStatus, error) {
	api, err := c.api()
	if err != nil {
		return RunStatus{}, err
	}
	return api.Start(ctx, client.StartRequest{
		Prompt: o.Prompt, ConversationID: o.ConversationID, NewConversationID: o.NewConversationID,
		Agent: o.Agent, IdempotencyKey: o.Key, Caller: o.Caller,
	})
}

// Conversation reads one conversation.
func (c *Client) Conversation(ctx context.Context, id string) (*Conversation, error) {
	api, err := c.api()
	if err != nil {
		return nil, err
	}
	return api.Conversation(ctx, id)
}

// Pending lists every pending deferred call.
func (c *Client) Pending(ctx context.Context) ([]Pending, error) {
	api, err := c.api()
	if err != nil {
		return nil, err
	}
	return api.Pending(ctx)
}

// Cancel cancels a conversation (client.Client.Cancel).
func (c *Client) Cancel(ctx context.Context, id string) error {
	api, err := c.api()
	if err != nil {
		return err
	}
	return api.Cancel(ctx, id)
}

// Delete deletes a finished conversation (client.Client.Delete).
func (c *Client) Delete(ctx context.Context, id string) error {
	api, err := c.api()
	if err != nil {
		return err
	}
	return api.Delete(ctx, id)
}

// List returns a page of conversations (client.Client.List).
func (c *Client) List(ctx context.Context, opts ListOptions) (ConversationPage, error) {
	api, err := c.api()
	if err != nil {
		return ConversationPage{}, err
	}
	return api.List(ctx, opts)
}

// Conversations yields every conversation in status (client.Client.Conversations).
func (c *Client) Conversations(ctx context.Context, status string) iter.Seq2[ConversationSummary, error] {
	api, err := c.api()
	if err != nil {
		return func(yield func(ConversationSummary, error) bool) { yield(ConversationSummary{}, err) }
	}
	return api.Conversations(ctx, status)
}

// DeadLetters returns a page of dead letters (GET /v1/dlq).
func (c *Client) DeadLetters(ctx context.Context, opts RecordOptions) (DeadLetterPage, error) {
	api, err := c.api()
	if err != nil {
		return DeadLetterPage{}, err
	}
	return api.DeadLetters(ctx, opts)
}

// Audit returns a page of audit records (GET /v1/audit).
func (c *Client) Audit(ctx context.Context, opts RecordOptions) (AuditPage, error) {
	api, err := c.api()
	if err != nil {
		return AuditPage{}, err
	}
	return api.Audit(ctx, opts)
}

// GiveGrant stores a standing decision and returns it.
func (c *Client) GiveGrant(ctx context.Context, o GrantOptions) (Grant, error) {
	api, err := c.api()
	if err != nil {
		return Grant{}, err
	}
	return api.GiveGrant(ctx, o)
}

// Grants lists the grants stored.
func (c *Client) Grants(ctx context.Context) ([]Grant, error) {
	api, err := c.api()
	if err != nil {
		return nil, err
	}
	return api.Grants(ctx)
}

// RevokeGrant deletes grant id; none is an *APIError with status 404.
func (c *Client) RevokeGrant(ctx context.Context, id string) error {
	api, err := c.api()
	if err != nil {
		return err
	}
	return api.RevokeGrant(ctx, id)
}

// health reads /healthz: the pid of the process that answers.
func (c *Client) health(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(c.BaseURL, "/")+"/healthz", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var h struct {
		PID int `json:"pid"`
	}
	if resp.StatusCode/100 != 2 {
		return 0, &APIError{Status: resp.StatusCode, Message: "not healthy"}
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return 0, fmt.Errorf("GET /healthz: decode answer: %w", err)
	}
	return h.PID, nil
}

// WaitHealthy polls /healthz until it answers 2xx or ctx ends.
func (c *Client) WaitHealthy(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		_, err := c.health(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("orchestrator at %s not healthy: %w", c.BaseURL, errors.Join(ctx.Err(), err))
		case <-t.C:
		}
	}
}

// WaitHealthyPID waits until /healthz answers from process pid. It fails at
// once when another process answers, or when alive reports that pid has
// exited.
func (c *Client) WaitHealthyPID(ctx context.Context, pid int, alive func() bool) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if !alive() {
			return fmt.Errorf("orchestrator (pid %d) exited before it answered at %s", pid, c.BaseURL)
		}
		// Bounded: whatever holds the port may accept and never answer.
		actx, cancel := context.WithTimeout(ctx, time.Second)
		got, err := c.health(actx)
		cancel()
		switch {
		case err == nil && got == pid:
			return nil
		case err == nil:
			return fmt.Errorf("another server (pid %d) answers at %s, not orchestrator %d", got, c.BaseURL, pid)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("orchestrator at %s not healthy: %w", c.BaseURL, errors.Join(ctx.Err(), err))
		case <-t.C:
		}
	}
}

// WaitTerminal polls the conversation until it is completed or failed. An
// answer that will not change by waiting (404 for an unknown id, 401, any
// 4xx) ends the wait at once.
func (c *Client) WaitTerminal(ctx context.Context, id string, every time.Duration) (*Conversation, error) {
	t := time.NewTicker(every)
	defer t.Stop()
	// The last state read: a read that the end of ctx cut short says
	// nothing of where the conversation stands.
	var last *Conversation
	for {
		conv, err := c.Conversation(ctx, id)
		if err == nil && conv.Terminal() {
			return conv, nil
		}
		if err == nil {
			last = conv
		}
		var ae *APIError
		if errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 && ae.Status != http.StatusTooManyRequests {
			return nil, fmt.Errorf("conversation %s: %w", id, err)
		}
		select {
		case <-ctx.Done():
			if last != nil {
				err = fmt.Errorf("conversation %s still %s", id, last.Status)
			}
			return last, errors.Join(ctx.Err(), err)
		case <-t.C:
		}
	}
}
