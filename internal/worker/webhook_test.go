package worker_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/worker"
)

func TestWebhook(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		status  int
		body    string
		want    bus.CallReply
		wantErr bool
	}{
		{name: "2xx json", status: 200, body: `{"temp": 21.5}`, want: bus.CallReply{Outcome: bus.OutcomeReturn, Value: json.RawMessage(`{"temp":21.5}`)}},
		{name: "2xx text", status: 201, body: "sunny", want: bus.CallReply{Outcome: bus.OutcomeReturn, Value: json.RawMessage(`"sunny"`)}},
		{name: "2xx model-retry", status: 200, body: `{"kind":"model-retry","message":"which city?"}`, want: bus.CallReply{Outcome: bus.OutcomeRetry, Message: "which city?"}},
		{name: "2xx tool-failed", status: 200, body: `{"kind":"tool-failed","message":"closed"}`, want: bus.CallReply{Outcome: bus.OutcomeFailed, Message: "closed"}},
		{name: "4xx fails", status: 404, body: "no such city\n", want: bus.CallReply{Outcome: bus.OutcomeFailed, Message: "HTTP 404 Not Found: no such city"}},
		{name: "4xx without body", status: 403, want: bus.CallReply{Outcome: bus.OutcomeFailed, Message: "HTTP 403 Forbidden"}},
		{name: "429 is transient", status: 429, body: "slow down", wantErr: true},
		{name: "5xx is transient", status: 503, body: "down", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got struct {
				header http.Header
				body   bus.CallRequest
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

			h := &worker.Webhook{URL: srv.URL, Header: http.Header{"Authorization": {"Bearer t"}}}
			req := callRequest("weather", `{"city":"Paris"}`)
			reply, err := h.Execute(t.Context(), req)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Execute error = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr {
				if diff := cmp.Diff(tt.want, reply); diff != "" {
					t.Errorf("reply (-want +got):\n%s", diff)
				}
			}
			for k, v := range map[string]string{
				"Content-Type":    "application/json",
				"Idempotency-Key": "run1:call1",
				"Authorization":   "Bearer t",
				"Toolgate-Run":    "run1",
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
	reply, err := (&worker.Webhook{URL: srv.URL}).Execute(t.Context(), callRequest("t", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if reply.Outcome != bus.OutcomeFailed || len(reply.Message) > 600 {
		t.Errorf("got outcome %q with a %d-byte message, want failed and short", reply.Outcome, len(reply.Message))
	}
}

func TestWebhookConnectionErrorIsTransient(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	if reply, err := (&worker.Webhook{URL: url}).Execute(t.Context(), callRequest("t", `{}`)); err == nil {
		t.Fatalf("Execute = %+v, nil; want an error", reply)
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
	reply, err := (&worker.Webhook{URL: srv.URL}).Execute(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(bus.CallReply{Outcome: bus.OutcomeFailed, Message: "timed out"}, reply); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
}
