// Package webhook is tool-worker's http executor: it POSTs each call to a
// URL.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/toolgate/toolgate/internal/worker/executor"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/httpretry"
	"github.com/toolgate/toolgate/wire"
)

// Webhook is the http executor: it POSTs each call to a URL.
//
// The body is the CallRequest as JSON, with the headers Content-Type
// application/json, Accept application/json, Idempotency-Key
// (run_id:tool_call_id, the same on every attempt and redelivery),
// Toolgate-Run and Toolgate-Call. A 2xx response's body is the result, read
// by executor.ParseResult. A 4xx response fails the call with its status and the
// start of its body, except 408 and 429, which like 5xx responses and
// connection errors are transient: the call is POSTed again after a wait
// (Retries, Backoff, the answer's executor.Retry-After), and fails with the last
// answer once the retries are spent or the wait would pass the call's
// deadline. A call that outlives its deadline fails with "timed out".
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
	// Retries is how often a call is POSTed again after a transient
	// answer, within one delivery (the worker keeps the call with
	// in-progress acks meanwhile). Zero means 3; a negative value sends each
	// call once.
	Retries int
	// Backoff is the wait before the first retry, doubled at each next one
	// up to 30s (or Backoff, if longer), less up to a quarter at random. A
	// transient answer's executor.Retry-After (seconds or an HTTP-date) sets the wait
	// instead. Zero means 1s.
	Backoff time.Duration
	// Logger receives a warning per transient answer. Nil discards them.
	Logger *slog.Logger

	// now reads executor.Retry-After dates and deadlines, sleep waits between
	// attempts: seams for tests. Nil: the real clock.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

// Defaults of Webhook.Retries and Webhook.Backoff.
const (
	DefaultRetries = 3
	DefaultBackoff = time.Second
)

// bodyExcerpt is how much of an error response a failed reply quotes.
const bodyExcerpt = 512

// Execute POSTs req to the webhook, again after each transient answer
// while retries and the call's deadline allow.
func (h *Webhook) Execute(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
	if len(req.Args) == 0 {
		req.Args = json.RawMessage("{}")
	}
	body, err := json.Marshal(req)
	if err != nil {
		return executor.Failed("encode call request: %v", err), nil
	}
	ctx, cancel := executor.WithCallDeadline(ctx, req)
	defer cancel()

	retries, backoff := h.Retries, h.Backoff
	switch {
	case retries == 0:
		retries = DefaultRetries
	case retries < 0:
		retries = 0
	}
	if backoff <= 0 {
		backoff = DefaultBackoff
	}
	now, sleep := h.now, h.sleep
	if now == nil {
		now = time.Now
	}
	if sleep == nil {
		sleep = httpretry.Sleep
	}
	log := h.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for n := 0; ; n++ {
		reply, t := h.post(ctx, req, body)
		if t == nil {
			return reply, nil
		}
		if executor.TimedOut(ctx) {
			return executor.Failed(executor.TimedOutMessage), nil
		}
		if ctx.Err() != nil {
			// The worker is stopping or the call was cancelled: it
			// decides what becomes of the call.
			return wire.CallReply{}, fmt.Errorf("webhook %s: %w", executor.RedactURL(h.URL), t.err)
		}
		if n >= retries {
			return executor.Failed("%s", t.message(n+1)), nil
		}
		wait := httpretry.Backoff(backoff, n)
		if d, found := httpretry.After(t.header, now()); found {
			wait = d
		}
		if !req.Deadline.IsZero() && now().Add(wait).After(req.Deadline) {
			return executor.Failed("%s; not retried: the call's deadline comes before the retry (in %s)", t.message(n+1), wait.Round(time.Millisecond)), nil
		}
		log.WarnContext(ctx, "webhook answer transient; retrying", slog.String("tool", req.ToolName),
			slog.String("url", executor.RedactURL(h.URL)), slog.Int("attempt", n+1), slog.Duration("wait", wait), slog.Any("error", t.err))
		if err := sleep(ctx, wait); err != nil {
			if executor.TimedOut(ctx) {
				return executor.Failed(executor.TimedOutMessage), nil
			}
			return wire.CallReply{}, fmt.Errorf("webhook %s: %w", executor.RedactURL(h.URL), err)
		}
	}
}

// transient is an attempt that may pass if made again: a 408, 429 or 5xx
// answer (status set), or no answer at all.
type transient struct {
	status string // "HTTP 503 Service Unavailable: <start of body>"; empty: no answer
	header http.Header
	err    error
}

// message is what the model reads of the last transient attempt once no
// other comes. A connection error's details (addresses, the URL) are for
// the worker's log, not the model.
func (t *transient) message(attempts int) string {
	if t.status != "" {
		return t.status
	}
	return fmt.Sprintf("the tool's HTTP endpoint could not be reached (%d attempts)", attempts)
}

// post makes one attempt: a reply, or what makes it transient.
func (h *Webhook) post(ctx context.Context, req wire.CallRequest, body []byte) (wire.CallReply, *transient) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		// Not the error: it quotes the URL, credentials and all.
		return executor.Failed("the tool's HTTP endpoint URL is not valid"), nil
	}
	for k, vs := range h.Header {
		for _, v := range vs {
			hreq.Header.Add(k, v)
		}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("Idempotency-Key", executor.IdempotencyKey(req))
	hreq.Header.Set("Toolgate-Run", req.RunID)
	hreq.Header.Set("Toolgate-Call", req.ToolCallID)

	client := h.Client
	if client == nil {
		client = http.DefaultClient
	}
	maxBody := h.MaxBody
	if maxBody <= 0 {
		maxBody = executor.DefaultMaxOutput
	}

	resp, err := client.Do(hreq)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold credentials
		}
		return wire.CallReply{}, &transient{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return wire.CallReply{}, &transient{err: fmt.Errorf("read response: %w", err)}
	}
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		if int64(len(data)) > maxBody {
			return executor.Failed("response exceeds %d bytes", maxBody), nil
		}
		return executor.ParseResult(data), nil
	case code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500:
		st := statusText(resp.Status, data)
		return wire.CallReply{}, &transient{status: st, header: resp.Header, err: errors.New(st)}
	default:
		return executor.Failed("%s", statusText(resp.Status, data)), nil
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
