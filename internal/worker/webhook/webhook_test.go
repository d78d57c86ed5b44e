package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolgate/toolgate/internal/httpretry/httpretrytest"
	"github.com/toolgate/toolgate/internal/worker/webhook"
	"github.com/toolgate/toolgate/wire"
)

func TestWebhook(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		status int
		body   string
		want   wire.CallReply
	}{
		{name: "2xx json", status: 200, body: `{"temp": 21.5}`, want: wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`{"temp":21.5}`)}},
		{name: "2xx text", status: 201, body: "sunny", want: wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"sunny"`)}},
		{name: "2xx model-retry", status: 200, body: `{"kind":"model-retry","message":"which city?"}`, want: wire.CallReply{Outcome: wire.OutcomeRetry, Message: "which city?"}},
		{name: "2xx tool-failed", status: 200, body: `{"kind":"tool-failed","message":"closed"}`, want: wire.CallReply{Outcome: wire.OutcomeFailed, Message: "closed"}},
		{name: "4xx fails", status: 404, body: "no such city\n", want: wire.CallReply{Outcome: wire.OutcomeFailed, Message: "HTTP 404 Not Found: no such city"}},
		{name: "4xx without body", status: 403, want: wire.CallReply{Outcome: wire.OutcomeFailed, Message: "HTTP 403 Forbidden"}},
		// Without retries a transient answer fails the call at once.
		{name: "429 without retries", status: 429, body: "slow down", want: wire.CallReply{Outcome: wire.OutcomeFailed, Message: "HTTP 429 Too Many Requests: slow down"}},
		{name: "5xx without retries", status: 503, body: "down", want: wire.CallReply{Outcome: wire.OutcomeFailed, Message: "HTTP 503 Service Unavailable: down"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got struct {
				header http.Header
				body   wire.CallRequest
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got.header = r.Header.Clone()
				data, _ := io.ReadAll(r.Body)
				if err := json.Unmarshal(data, &got.body); err != nil {
					t.Errorf("request body %q: %v", data, err)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()

			h := &webhook.Webhook{URL: srv.URL, Header: http.Header{"Authorization": {"Bearer t"}}, Retries: -1}
			req := callRequest("weather", `{"city":"Paris"}`)
			reply, err := h.Execute(t.Context(), req)
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			if diff := cmp.Diff(tt.want, reply); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
			for k, v := range map[string]string{
				"Content-Type":    "application/json",
				"Idempotency-Key": "run1:call1",
				"Authorization":   "Bearer t",
				"Toolgate-Run":    "run1",
				"Toolgate-Call":   "call1",
				"Accept":          "application/json",
			} {
				if g := got.header.Get(k); g != v {
					t.Errorf("header %s = %q, want %q", k, g, v)
				}
			}
			if got.body.ToolCallID != "call1" || string(got.body.Args) != `{"city":"Paris"}` {
				t.Errorf("posted %+v, want the call request", got.body)
			}
		})
	}
}

func TestWebhookLongErrorBodyIsShortened(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		io.WriteString(w, strings.Repeat("x", 10000))
	}))
	defer srv.Close()
	reply, err := (&webhook.Webhook{URL: srv.URL}).Execute(t.Context(), callRequest("t", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if reply.Outcome != wire.OutcomeFailed || len(reply.Message) > 600 {
		t.Errorf("got outcome %q with a %d-byte message, want failed and short", reply.Outcome, len(reply.Message))
	}
}

// A transient answer (408, 429, 5xx, no connection) is POSTed again, with
// the same Idempotency-Key, after the answer's Retry-After (seconds or an
// HTTP-date) or the doubling backoff; the call fails with the last answer
// once the retries are spent or the wait would pass its deadline. Other
// answers are not retried.
func TestWebhookRetries(t *testing.T) {
	t.Parallel()
	start := time.Now()
	type answer struct {
		status int
		header map[string]string
	}
	tests := []struct {
		name     string
		hook     webhook.Webhook
		answers  []answer // then 200
		down     bool     // no server at all
		deadline time.Duration
		// wantWaits is each wait's range [lo, hi].
		wantWaits    [][2]time.Duration
		wantAttempts int
		want         wire.CallReply
		wantIn       string // for a failure: in its message
		wantNotIn    string
	}{
		{
			name:         "503 with retry-after seconds",
			answers:      []answer{{503, map[string]string{"Retry-After": "7"}}},
			wantWaits:    [][2]time.Duration{{7 * time.Second, 7 * time.Second}},
			wantAttempts: 2,
			want:         wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"done"`)},
		},
		{
			name:         "429 with retry-after date",
			answers:      []answer{{429, map[string]string{"Retry-After": start.Add(90 * time.Second).Format(http.TimeFormat)}}},
			deadline:     5 * time.Minute,
			wantWaits:    [][2]time.Duration{{89 * time.Second, 90 * time.Second}}, // the date is in whole seconds
			wantAttempts: 2,
			want:         wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"done"`)},
		},
		{
			name:    "backoff doubles, then the last answer fails the call",
			hook:    webhook.Webhook{Retries: 3, Backoff: 2 * time.Second},
			answers: []answer{{502, nil}, {500, nil}, {408, nil}, {503, nil}},
			wantWaits: [][2]time.Duration{
				{1500 * time.Millisecond, 2 * time.Second},
				{3 * time.Second, 4 * time.Second},
				{6 * time.Second, 8 * time.Second},
			},
			wantAttempts: 4,
			want:         wire.CallReply{Outcome: wire.OutcomeFailed, Message: "HTTP 503 Service Unavailable: busy"},
		},
		{
			name:         "retry-after past the deadline",
			answers:      []answer{{503, map[string]string{"Retry-After": "120"}}},
			wantAttempts: 1,
			wantIn:       "HTTP 503 Service Unavailable: busy; not retried: the call's deadline comes before the retry (in 2m0s)",
		},
		{
			name:         "4xx not retried",
			answers:      []answer{{400, map[string]string{"Retry-After": "1"}}},
			wantAttempts: 1,
			want:         wire.CallReply{Outcome: wire.OutcomeFailed, Message: "HTTP 400 Bad Request: busy"},
		},
		{
			name:         "retries off",
			hook:         webhook.Webhook{Retries: -1},
			answers:      []answer{{503, nil}},
			wantAttempts: 1,
			want:         wire.CallReply{Outcome: wire.OutcomeFailed, Message: "HTTP 503 Service Unavailable: busy"},
		},
		{
			name:      "unreachable",
			hook:      webhook.Webhook{Retries: 2},
			down:      true,
			wantWaits: [][2]time.Duration{{750 * time.Millisecond, time.Second}, {1500 * time.Millisecond, 2 * time.Second}},
			wantIn:    "the tool's HTTP endpoint could not be reached (3 attempts)",
			wantNotIn: "127.0.0.1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var (
				mu   sync.Mutex
				keys []string
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n := len(keys)
				keys = append(keys, r.Header.Get("Idempotency-Key"))
				mu.Unlock()
				if n < len(tt.answers) {
					for k, v := range tt.answers[n].header {
						w.Header().Set(k, v)
					}
					w.WriteHeader(tt.answers[n].status)
					io.WriteString(w, "busy")
					return
				}
				io.WriteString(w, "done")
			}))
			defer srv.Close()
			if tt.down {
				srv.Close()
			}
			h := tt.hook
			h.URL = srv.URL
			w := httpretrytest.New(start)
			webhook.SetClock(&h, w.Clock, w.Sleep)
			req := callRequest("t", `{}`)
			req.Deadline = start.Add(time.Minute)
			if tt.deadline != 0 {
				req.Deadline = start.Add(tt.deadline)
			}
			reply, err := h.Execute(t.Context(), req)
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if !tt.down && len(keys) != tt.wantAttempts {
				t.Errorf("%d attempts, want %d", len(keys), tt.wantAttempts)
			}
			for i, k := range keys {
				if k != "run1:call1" {
					t.Errorf("attempt %d Idempotency-Key %q, want run1:call1", i, k)
				}
			}
			got := w.All()
			if len(got) != len(tt.wantWaits) {
				t.Fatalf("waits %v, want %d of them", got, len(tt.wantWaits))
			}
			for i, d := range got {
				if d < tt.wantWaits[i][0] || d > tt.wantWaits[i][1] {
					t.Errorf("wait %d = %s, want within %v", i, d, tt.wantWaits[i])
				}
			}
			if tt.wantIn != "" {
				if reply.Outcome != wire.OutcomeFailed || !strings.Contains(reply.Message, tt.wantIn) || (tt.wantNotIn != "" && strings.Contains(reply.Message, tt.wantNotIn)) {
					t.Errorf("reply %+v, want failed with %q", reply, tt.wantIn)
				}
				return
			}
			if diff := cmp.Diff(tt.want, reply); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
		})
	}
}

// A call whose worker stops while it waits to retry is handed back (an
// error, not a failed reply): another worker may run it.
func TestWebhookStopWhileWaiting(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	h := &webhook.Webhook{URL: srv.URL}
	webhook.SetClock(h, time.Now, func(ctx context.Context, _ time.Duration) error {
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	reply, err := h.Execute(ctx, callRequest("t", `{}`))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Execute = %+v, %v; want context.Canceled", reply, err)
	}
}

func TestWebhookTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	req := callRequest("t", `{}`)
	req.Deadline = time.Now().Add(200 * time.Millisecond)
	reply, err := (&webhook.Webhook{URL: srv.URL}).Execute(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wire.CallReply{Outcome: wire.OutcomeFailed, Message: "timed out"}, reply); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
}
