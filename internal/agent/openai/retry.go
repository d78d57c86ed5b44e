package openai

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/toolgate/toolgate/internal/httpretry"
)

const (
	defaultMaxRetries = 4
	defaultBackoff    = time.Second
	// maxRetryAfter is the longest wait a server may ask for. One asking for
	// more fails the request at once: a run held for longer than that is
	// worse than a failed one the user can start again.
	maxRetryAfter = 2 * time.Minute
)

// retryable tells whether a failed attempt may be sent again: a connection
// error, or a 408, 409, 429 or 5xx answer (a server's x-should-retry header
// overrides the status). res is the attempt's response, nil when none came.
// An answer that came with a 2xx status and then broke is not retried: a
// stream's deltas already went to the caller, and a second attempt would
// repeat them.
func retryable(ctx context.Context, res *http.Response, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if res == nil {
		var ue *url.Error
		return errors.As(err, &ue)
	}
	if res.StatusCode < 400 {
		return false
	}
	switch res.Header.Get("X-Should-Retry") {
	case "true":
		return true
	case "false":
		return false
	}
	switch res.StatusCode {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests:
		return true
	}
	return res.StatusCode >= 500
}

// retryWait is the wait before retry number n (0 for the first): the
// server's Retry-After-Ms or Retry-After (seconds or an HTTP-date) when it
// gives one, else Backoff doubled n times, capped, with jitter
// (httpretry.Backoff). ok is false when the server asks for more than
// maxRetryAfter.
func (m *Model) retryWait(res *http.Response, n int) (wait time.Duration, ok bool) {
	if res != nil {
		if d, found := httpretry.After(res.Header, m.now()); found {
			return d, d <= maxRetryAfter
		}
	}
	return httpretry.Backoff(m.cfg.Backoff, n), true
}
