package main

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/worker/webhook"
)

// --http-retries and --http-backoff set the retry policy of every --http
// tool; 0 retries sends each call once.
func TestHTTPRetryFlags(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		wantRetries int
		wantBackoff time.Duration
	}{
		{name: "defaults", wantRetries: webhook.DefaultRetries, wantBackoff: webhook.DefaultBackoff},
		{name: "set", args: []string{"--http-retries", "6", "--http-backoff", "250ms"}, wantRetries: 6, wantBackoff: 250 * time.Millisecond},
		{name: "none", args: []string{"--http-retries", "0"}, wantRetries: -1, wantBackoff: webhook.DefaultBackoff},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseFlags(append([]string{"--http", "a=http://127.0.0.1:1/a", "--http", "b=https://example.com/b"}, tt.args...), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			tools, _, err := configureTools(t.Context(), o, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if len(tools) != 2 {
				t.Fatalf("%d tools, want 2", len(tools))
			}
			for _, tool := range tools {
				h, ok := tool.Executor.(*webhook.Webhook)
				if !ok {
					t.Fatalf("%s: executor %T, want *webhook.Webhook", tool.Spec.Name, tool.Executor)
				}
				if h.Retries != tt.wantRetries || h.Backoff != tt.wantBackoff || h.Logger == nil {
					t.Errorf("%s: retries %d, backoff %s, logger %v; want %d, %s and a logger", tool.Spec.Name, h.Retries, h.Backoff, h.Logger, tt.wantRetries, tt.wantBackoff)
				}
			}
		})
	}
}
