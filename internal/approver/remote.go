package approver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Orchestrator reads an orchestrator's HTTP API: its pending calls and its
// conversations. Approvers use it, when one is reachable, as the authority
// on what is still pending.
type Orchestrator struct {
	// BaseURL is the API's root, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Token is the API's bearer token; empty sends none.
	Token string
	// Client makes the requests. Defaults to a client with a 10s timeout.
	Client *http.Client
}

// PendingCall is one entry of the orchestrator's GET /v1/pending.
type PendingCall struct {
	ConversationID string          `json:"conversation_id,omitempty"`
	RunID          string          `json:"run_id,omitempty"`
	ToolCallID     string          `json:"tool_call_id"`
	ToolName       string          `json:"tool_name"`
	Kind           string          `json:"kind"`
	Args           json.RawMessage `json:"args"`
	Deadline       time.Time       `json:"deadline"`
}

// Conversation is the orchestrator's GET /v1/conversations/{id}. Messages
// are in the conformance MESSAGE shape: {"request": [parts]} or
// {"response": [parts]}.
type Conversation struct {
	ConversationID string            `json:"conversation_id"`
	Status         string            `json:"status"`
	Output         *string           `json:"output,omitempty"`
	Error          string            `json:"error,omitempty"`
	Pending        []PendingCall     `json:"pending"`
	Messages       []json.RawMessage `json:"messages"`
}

// Pending is GET /v1/pending: every deferred call still waiting.
func (o *Orchestrator) Pending(ctx context.Context) ([]PendingCall, error) {
	var out struct {
		Pending []PendingCall `json:"pending"`
	}
	if err := o.get(ctx, "/v1/pending", &out); err != nil {
		return nil, err
	}
	return out.Pending, nil
}

// Conversation is GET /v1/conversations/{id}.
func (o *Orchestrator) Conversation(ctx context.Context, id string) (*Conversation, error) {
	var out Conversation
	if err := o.get(ctx, "/v1/conversations/"+url.PathEscape(id), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// StatusError is a non-2xx answer of the orchestrator.
type StatusError struct {
	Code    int
	Message string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("orchestrator answered %d: %s", e.Code, e.Message)
}

func (o *Orchestrator) get(ctx context.Context, path string, v any) error {
	c := o.Client
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(o.BaseURL, "/")+path, nil)
	if err != nil {
		return fmt.Errorf("orchestrator %s: %w", path, err)
	}
	req.Header.Set("Accept", "application/json")
	if o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+o.Token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("orchestrator %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("orchestrator %s: %w", path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		msg := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
		}
		if len(msg) > 200 {
			msg = msg[:200]
		}
		return fmt.Errorf("orchestrator %s: %w", path, &StatusError{Code: resp.StatusCode, Message: msg})
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("orchestrator %s: %w", path, err)
	}
	return nil
}
