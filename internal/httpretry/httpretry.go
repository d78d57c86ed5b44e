// Package httpretry is the retry policy toolgate's HTTP clients share (the
// openai model's and the tool-worker's HTTP executor): the wait a server
// asks for in its answer, and the backoff between attempts when it asks
// for none.
package httpretry

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// MaxBackoff caps the doubling of a first backoff (unless the first is
// itself longer): past it, a server that stays down fails its caller sooner
// by a few attempts, not by hours.
const MaxBackoff = 30 * time.Second

// Backoff is the wait before retry number n (0 for the first): first
// doubled n times, capped at MaxBackoff (or first, if longer), less up to a
// quarter at random, so that clients failed together do not come back
// together.
func Backoff(first time.Duration, n int) time.Duration {
	limit := max(MaxBackoff, first)
	wait := limit
	if d := float64(first) * math.Pow(2, float64(n)); d < float64(limit) {
		wait = time.Duration(d)
	}
	if j := int64(wait / 4); j > 0 {
		wait -= time.Duration(rand.Int64N(j))
	}
	return wait
}

// After reads the wait an answer's headers ask for: Retry-After-Ms
// (OpenAI's, in milliseconds) or Retry-After, in seconds or as an
// HTTP-date read against now. A date in the past asks for no wait; found is
// false when neither header is there or parses.
func After(h http.Header, now time.Time) (wait time.Duration, found bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 && !math.IsInf(ms, 0) {
			return durationOf(ms, time.Millisecond), true
		}
	}
	v := h.Get("Retry-After")
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

// Sleep waits d or until ctx ends, and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
