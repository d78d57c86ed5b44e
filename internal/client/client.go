// Package client talks to the orchestrator's HTTP API: start runs, read
// conversations and pending calls, and follow a conversation's event stream.
// The demo (`make run`) and the end-to-end tests use it.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolgate/toolgate/wire"
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

// maxErrorMessage bounds APIError.Message: the answer's body may be
// anything, and callers show the message to people.
const maxErrorMessage = 200

// RunStatus is the answer to starting a run.
type RunStatus struct {
	RunID          string `json:"run_id"`
	ConversationID string `json:"conversation_id"`
	Status         string `json:"status"`
}

// Conversation is the orchestrator's view of a conversation.
type Conversation struct {
	ConversationID string          `json:"conversation_id"`
	Status         string          `json:"status"`
	Output         json.RawMessage `json:"output,omitempty"`
	Error          string          `json:"error,omitempty"`
	// Agent is the agent the conversation runs with, AgentDigest the
	// digest of its config; Unserved says why no replica runs it now.
	Agent       string `json:"agent,omitempty"`
	AgentDigest string `json:"agent_digest,omitempty"`
	// Caller is what the application said of who gave the latest prompt.
	Caller   json.RawMessage   `json:"caller,omitempty"`
	Unserved string            `json:"unserved,omitempty"`
	Runs     []RunStatus       `json:"runs"`
	Pending  []Pending         `json:"pending"`
	Messages []json.RawMessage `json:"messages"`
	// QueuedPrompt is a prompt given while the conversation was paused,
	// waiting for the batch to be answered; nil when there is none.
	QueuedPrompt *QueuedPrompt `json:"queued_prompt,omitempty"`
}

// QueuedPrompt is a prompt waiting for its conversation's batch, and the
// run (status "queued") that sends it.
type QueuedPrompt struct {
	RunID  string `json:"run_id"`
	Prompt string `json:"prompt"`
}

// Terminal reports whether the conversation has stopped for good (until a
// new prompt continues it).
func (c *Conversation) Terminal() bool {
	return c.Status == "completed" || c.Status == "failed" || c.Status == "cancelled"
}

// Pending is one deferred call waiting for a reply.
type Pending = wire.PendingCall

// APIError is a non-2xx answer.
type APIError struct {
	Status int
	// Message is the answer's error, or else the start of its body.
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("orchestrator: %d: %s", e.Status, e.Message) }

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	return c.doWith(ctx, method, path, nil, body, out)
}

func (c *Client) doWith(ctx context.Context, method, path string, hdr http.Header, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		if len(e.Error) > maxErrorMessage {
			e.Error = e.Error[:maxErrorMessage]
		}
		return &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// StartRun submits a prompt; an empty conversationID starts a new
// conversation. It is safe against lost answers: the request carries a
// fresh Idempotency-Key and is tried again with the same key (up to
// startAttempts times, while ctx lasts) when the connection fails or the
// orchestrator answers 500, 502, 503 or 504, so a start that happened but
// whose answer was lost is answered, not repeated.
func (c *Client) StartRun(ctx context.Context, prompt, conversationID string) (RunStatus, error) {
	return c.StartRunKey(ctx, prompt, conversationID, newKey())
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
	body := map[string]any{"prompt": o.Prompt}
	if o.ConversationID != "" {
		body["conversation_id"] = o.ConversationID
	}
	if o.Agent != "" {
		body["agent"] = o.Agent
	}
	if o.NewConversationID != "" {
		body["new_conversation_id"] = o.NewConversationID
	}
	if len(o.Caller) > 0 {
		body["caller"] = o.Caller
	}
	key := o.Key
	if key == "" {
		key = newKey()
	}
	hdr := http.Header{"Idempotency-Key": []string{key}}
	var (
		rs      RunStatus
		errs    []error
		backoff = 200 * time.Millisecond
	)
	for attempt := 1; ; attempt++ {
		err := c.doWith(ctx, http.MethodPost, "/v1/runs", hdr, body, &rs)
		if err == nil {
			return rs, nil
		}
		if !retryable(err) || attempt == startAttempts || ctx.Err() != nil {
			return rs, errors.Join(append(errs, err)...)
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return rs, errors.Join(append(errs, ctx.Err())...)
		case <-t.C:
		}
		backoff *= 2
	}
}

// startAttempts bounds StartRun's tries.
const startAttempts = 4

// retryable reports whether a request may have failed for a reason that
// passes: no answer at all, or a server-side failure.
func retryable(err error) bool {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		switch apiErr.Status {
		case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Conversation reads one conversation.
func (c *Client) Conversation(ctx context.Context, id string) (*Conversation, error) {
	var conv Conversation
	if err := c.do(ctx, http.MethodGet, "/v1/conversations/"+url.PathEscape(id), nil, &conv); err != nil {
		return nil, err
	}
	return &conv, nil
}

// Pending lists every pending deferred call.
func (c *Client) Pending(ctx context.Context) ([]Pending, error) {
	var out struct {
		Pending []Pending `json:"pending"`
	}
	err := c.do(ctx, http.MethodGet, "/v1/pending", nil, &out)
	return out.Pending, err
}

// WaitHealthy polls /healthz until it answers 2xx or ctx ends.
func (c *Client) WaitHealthy(ctx context.Context) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		err := c.do(ctx, http.MethodGet, "/healthz", nil, nil)
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
		var h struct {
			PID int `json:"pid"`
		}
		// Bounded: whatever holds the port may accept and never answer.
		actx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.do(actx, http.MethodGet, "/healthz", nil, &h)
		cancel()
		switch {
		case err == nil && h.PID == pid:
			return nil
		case err == nil:
			return fmt.Errorf("another server (pid %d) answers at %s, not orchestrator %d", h.PID, c.BaseURL, pid)
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
