package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/bus"
)

// Webhook is the http executor: it POSTs each call to a URL.
//
// The body is the CallRequest as JSON, with the headers Content-Type
// application/json, Idempotency-Key (run_id:tool_call_id, the same on every
// redelivery), Toolgate-Run and Toolgate-Call. A 2xx response's body is the
// result, read by ParseResult. A 4xx response fails the call with its status
// and the start of its body, except 408 and 429, which like 5xx responses and
// connection errors are transient: the call is released and retried. A call
// that outlives its deadline fails with "timed out".
type Webhook struct {
	// URL receives the calls; required.
	URL string
	// Client sends the requests. Defaults to a client without timeout of its
	// own: the call's deadline bounds each request.
	Client *http.Client
	// Header is added to every request (an Authorization header, say).
	Header http.Header
	// MaxBody bounds a response body; a larger result fails the call.
	// Defaults to 4 MiB.
	MaxBody int64
}

// bodyExcerpt is how much of an error response a failed reply quotes.
const bodyExcerpt = 512

// Execute POSTs req to the webhook.
func (h *Webhook) Execute(ctx context.Context, req bus.CallRequest) (bus.CallReply, error) {
	if len(req.Args) == 0 {
		req.Args = json.RawMessage("{}")
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Failed("encode call request: %v", err), nil
	}
	ctx, cancel := withCallDeadline(ctx, req)
	defer cancel()

	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return bus.CallReply{}, fmt.Errorf("webhook request: %w", err)
	}
	for k, vs := range h.Header {
		for _, v := range vs {
			hreq.Header.Add(k, v)
		}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("Idempotency-Key", IdempotencyKey(req))
	hreq.Header.Set("Toolgate-Run", req.RunID)
	hreq.Header.Set("Toolgate-Call", req.ToolCallID)

	client := h.Client
	if client == nil {
		client = http.DefaultClient
	}
	maxBody := h.MaxBody
	if maxBody <= 0 {
		maxBody = defaultMaxOutput
	}

	resp, err := client.Do(hreq)
	if err != nil {
		if timedOut(ctx) {
			return Failed(TimedOutMessage), nil
		}
		return bus.CallReply{}, fmt.Errorf("webhook %s: %w", redactURL(h.URL), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		if timedOut(ctx) {
			return Failed(TimedOutMessage), nil
		}
		return bus.CallReply{}, fmt.Errorf("webhook %s: read response: %w", redactURL(h.URL), err)
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		if int64(len(data)) > maxBody {
			return Failed("response exceeds %d bytes", maxBody), nil
		}
		return ParseResult(data), nil
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		return bus.CallReply{}, fmt.Errorf("webhook %s: %s", redactURL(h.URL), statusText(resp.Status, data))
	default:
		return Failed("%s", statusText(resp.Status, data)), nil
	}
}

// statusText is "HTTP <status>: <start of body>".
func statusText(status string, body []byte) string {
	excerpt := strings.TrimSpace(string(bytes.ToValidUTF8(body, []byte("\uFFFD"))))
	if len(excerpt) > bodyExcerpt {
		cut := bodyExcerpt
		for cut > 0 && !utf8.RuneStart(excerpt[cut]) {
			cut--
		}
		excerpt = excerpt[:cut] + "…"
	}
	if excerpt == "" {
		return "HTTP " + status
	}
	return "HTTP " + status + ": " + excerpt
}

// redactURL drops credentials, query and fragment from a URL for logs and
// errors.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid url)"
	}
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}
