package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// approver notify posts a request to the webhook with its inbox link and
// keeps running; a missing or bad --webhook is refused at once.
func TestNotifyPostsToTheWebhook(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies []string
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(raw))
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	srv := bustest.NewServer(t)
	b := bustest.Connect(t, srv, "test")
	bustest.Setup(t, b)
	publishApproval(t, b, `{"path":"__init__.py"}`)

	r := start(t, "notify", "--nats", srv.ClientURL(), "--webhook", hook.URL, "--inbox-url", "http://127.0.0.1:8090", "--id", "notifier")
	bustest.Poll(t, bustest.Timeout, "a post to the webhook", func() (bool, string) {
		r.checkRunning(t)
		mu.Lock()
		defer mu.Unlock()
		return len(bodies) == 1, r.logs.String()
	})
	mu.Lock()
	got := bodies[0]
	mu.Unlock()
	if !strings.Contains(got, "delete_file") || !strings.Contains(got, "http://127.0.0.1:8090/#call-run-1/call-1") {
		t.Errorf("posted %s", got)
	}
	if d := bustest.LastDecision(t, b, "run-1"); d != nil {
		t.Errorf("the notifier decided: %+v", d)
	}
	if err := r.stop(); err != nil {
		t.Errorf("run after cancel: %v\n%s", err, r.logs.String())
	}
	for _, args := range [][]string{
		{"notify"},
		{"notify", "--webhook", "not a url"},
		{"notify", "--webhook", hook.URL, "--inbox-url", "ftp://x"},
	} {
		if err := run(t.Context(), args, strings.NewReader(""), io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}
