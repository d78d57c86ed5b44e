package httpretry_test

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/httpretry"
)

func TestAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		header    http.Header
		want      time.Duration
		wantFound bool
	}{
		{name: "none", header: http.Header{}},
		{name: "seconds", header: http.Header{"Retry-After": {"7"}}, want: 7 * time.Second, wantFound: true},
		{name: "fraction of seconds", header: http.Header{"Retry-After": {"1.5"}}, want: 1500 * time.Millisecond, wantFound: true},
		{name: "zero", header: http.Header{"Retry-After": {"0"}}, want: 0, wantFound: true},
		{name: "http date", header: http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, want: 90 * time.Second, wantFound: true},
		{name: "date in the past", header: http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, want: 0, wantFound: true},
		{name: "milliseconds win", header: http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"3"}}, want: 250 * time.Millisecond, wantFound: true},
		{name: "bad milliseconds fall back", header: http.Header{"Retry-After-Ms": {"soon"}, "Retry-After": {"3"}}, want: 3 * time.Second, wantFound: true},
		{name: "negative", header: http.Header{"Retry-After": {"-5"}}},
		{name: "not a number nor a date", header: http.Header{"Retry-After": {"soon"}}},
		{name: "NaN", header: http.Header{"Retry-After": {"NaN"}}},
		{name: "huge", header: http.Header{"Retry-After": {"1e300"}}, want: math.MaxInt64, wantFound: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, found := httpretry.After(tt.header, now)
			if got != tt.want || found != tt.wantFound {
				t.Errorf("After = %s, %v; want %s, %v", got, found, tt.want, tt.wantFound)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		first  time.Duration
		n      int
		lo, hi time.Duration
	}{
		{name: "first", first: time.Second, n: 0, lo: 750 * time.Millisecond, hi: time.Second},
		{name: "doubled", first: time.Second, n: 3, lo: 6 * time.Second, hi: 8 * time.Second},
		{name: "capped", first: time.Second, n: 10, lo: 22500 * time.Millisecond, hi: 30 * time.Second},
		{name: "huge n", first: time.Second, n: 5000, lo: 22500 * time.Millisecond, hi: 30 * time.Second},
		{name: "first over the cap", first: time.Minute, n: 2, lo: 45 * time.Second, hi: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for range 100 {
				if got := httpretry.Backoff(tt.first, tt.n); got < tt.lo || got > tt.hi {
					t.Fatalf("Backoff(%s, %d) = %s, want within [%s, %s]", tt.first, tt.n, got, tt.lo, tt.hi)
				}
			}
		})
	}
}
