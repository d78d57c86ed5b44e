package openai

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

const (
	defaultMaxRetries = 4
	defaultBackoff    = time.Second
	// maxBackoff caps the doubling of Config.Backoff (unless Backoff is
	// itself longer): past it, a server that is down for long fails the run
	// sooner by a few retries, not by hours.
	maxBackoff = 30 * time.Second
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
// gives one, else Backoff doubled n times, capped, less up to a quarter at
// random so that clients failed together do not come back together. ok is
// false when the server asks for more than maxRetryAfter.
func (m *Model) retryWait(res *http.Response, n int) (wait time.Duration, ok bool) {
	if d, found := retryAfter(res, m.now()); found {
		return d, d <= maxRetryAfter
	}
	limit := max(maxBackoff, m.cfg.Backoff)
	d := float64(m.cfg.Backoff) * math.Pow(2, float64(n))
	wait = limit
	if d < float64(limit) {
		wait = time.Duration(d)
	}
	if j := int64(wait / 4); j > 0 {
		wait -= time.Duration(rand.Int64N(j))
	}
	return wait, true
}

// retryAfter reads the wait a response asks for. A date in the past, or a
// header that does not parse, asks for none (found is false for the
// latter, and the backoff applies).
func retryAfter(res *http.Response, now time.Time) (d time.Duration, found bool) {
	if res == nil {
		return 0, false
	}
	if v := res.Header.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && !math.IsInf(ms, 0) {
			return durationOf(ms, time.Millisecond), true
		}
	}
	v := res.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 && !math.IsInf(s, 0) {
		return durationOf(s, time.Second), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// durationOf is v units, saturated where a Duration would overflow.
func durationOf(v float64, unit time.Duration) time.Duration {
	if v*float64(unit) >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(v * float64(unit))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
