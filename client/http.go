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
	"strings"
	"time"
)

// APIError is an answer other than 2xx.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Message is the answer's error, or else the start of its body (at
	// most 200 bytes: the body may be anything, and callers show it).
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("orchestrator: %d: %s", e.Status, e.Message) }

// maxErrorMessage bounds APIError.Message.
const maxErrorMessage = 200

func (c *Client) httpClient() *http.Client {
	if c.http != nil {
		return c.http
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
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL+path, rd)
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
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
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

// startAttempts bounds Start's tries.
const startAttempts = 4

// start posts a run under its idempotency key, and tries again with the
// same key when the connection fails or the orchestrator answers 500, 502,
// 503 or 504, so a start that happened but whose answer was lost is
// answered, not repeated.
func (c *Client) start(ctx context.Context, body map[string]any, key string) (Run, error) {
	hdr := http.Header{"Idempotency-Key": []string{key}}
	var (
		rs      Run
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
