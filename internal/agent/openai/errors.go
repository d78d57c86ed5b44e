package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

// ErrUnauthorized is matched (errors.Is) by the error of a request the server
// answered with 401. It is not retried: a wrong key stays wrong.
var ErrUnauthorized = errors.New("unauthorized (check the API key)")

// StatusError is a non-2xx answer from the server after any retries.
// Message is the provider's own short explanation, cut to a few hundred
// characters and with the API key removed; the body itself is not kept.
type StatusError struct {
	StatusCode int
	Message    string
}

func (e *StatusError) Error() string {
	var b strings.Builder
	if e.StatusCode == http.StatusUnauthorized {
		b.WriteString(ErrUnauthorized.Error())
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "status %d", e.StatusCode)
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is makes errors.Is(err, ErrUnauthorized) hold for a 401.
func (e *StatusError) Is(target error) bool {
	return target == ErrUnauthorized && e.StatusCode == http.StatusUnauthorized
}

const (
	maxMessageLen  = 300
	maxErrBodyRead = 64 << 10
)

// apiError replaces what openai-go returned for a failed call by an error that
// is safe to log. openai-go's own error keeps the request (headers included)
// and the whole body, and it cannot decode the error bodies of servers that
// do not copy OpenAI's shape (Ollama's {"error":"..."}, vLLM's {"detail":...}),
// so the answer is read from the raw response instead.
func (m *Model) apiError(err error, raw *http.Response) error {
	if raw != nil && raw.StatusCode >= 400 {
		msg := ""
		var apiErr *oai.Error
		if errors.As(err, &apiErr) && apiErr.Message != "" {
			msg = apiErr.Message
		} else if raw.Body != nil {
			msg = providerMessage(drain(raw.Body, maxErrBodyRead))
		}
		return &StatusError{StatusCode: raw.StatusCode, Message: m.clean(msg)}
	}
	var streamErr *ssestream.StreamError
	if errors.As(err, &streamErr) {
		return fmt.Errorf("server sent an error: %s", m.clean(providerMessage(streamErr.Event.Data)))
	}
	var apiErr *oai.Error
	if errors.As(err, &apiErr) {
		return &StatusError{StatusCode: apiErr.StatusCode, Message: m.clean(apiErr.Message)}
	}
	return err
}

// providerMessage finds the human-readable part of an error body in the
// shapes OpenAI-compatible servers use; a body it does not recognise is kept
// as (cut) text.
func providerMessage(body []byte) string {
	var shape struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &shape) != nil {
		return strings.TrimSpace(string(body))
	}
	if len(shape.Error) > 0 {
		var s string
		if json.Unmarshal(shape.Error, &s) == nil {
			return s
		}
		var obj struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(shape.Error, &obj) == nil && obj.Message != "" {
			return obj.Message
		}
	}
	if shape.Message != "" {
		return shape.Message
	}
	if len(shape.Detail) > 0 {
		var s string
		if json.Unmarshal(shape.Detail, &s) == nil {
			return s
		}
		return string(shape.Detail)
	}
	return ""
}

// clean removes the API key (a local server may echo it) and cuts the
// message to one short line.
func (m *Model) clean(msg string) string {
	if m.cfg.APIKey != "" {
		msg = strings.ReplaceAll(msg, m.cfg.APIKey, "[redacted]")
	}
	msg = strings.Join(strings.Fields(msg), " ")
	if len(msg) > maxMessageLen {
		cut := maxMessageLen
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return msg
}
