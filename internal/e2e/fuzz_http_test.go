package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// FuzzHTTPHandlers sends arbitrary methods, paths and bodies to the real
// API on an embedded server: it never panics, never answers 5xx (nothing
// here fails underneath), and every error is a JSON object naming it.
func FuzzHTTPHandlers(f *testing.F) {
	seeds := []struct{ method, path, body string }{
		{"POST", "/v1/runs", `{"prompt":"hi"}`},
		{"POST", "/v1/runs", `{"prompt":"hi","conversation_id":"c1"}`},
		{"POST", "/v1/runs", `{"prompt":`},
		{"POST", "/v1/runs", `{"prompt":"x","history":[{"approved":true}]}`},
		{"POST", "/v1/runs", "\x00\xff"},
		{"POST", "/v1/runs", `{"prompt":"` + strings.Repeat("é", 1000) + `"}`},
		{"GET", "/v1/runs/r1", ""},
		{"GET", "/v1/runs/..%2f..%2fetc", ""},
		{"GET", "/v1/conversations/c1", ""},
		{"GET", "/v1/conversations/c1/events", ""},
		{"GET", "/v1/conversations/%00/events", ""},
		{"GET", "/v1/pending", ""},
		{"DELETE", "/v1/pending", ""},
		{"GET", "/healthz", ""},
		{"PATCH", "/v1/conversations/c1", "{}"},
		{"GET", "//v1/runs", ""},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, []byte(s.body))
	}
	sys := singleServer(f)
	o := startOrch(f, sys, orchestrator.Config{Bus: inProcess(f, sys, "orchestrator")})
	h := api.Handler(o, api.Config{})
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, "http://toolgate"+path, bytes.NewReader(body))
		if err != nil || !strings.HasPrefix(path, "/") {
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %q: %d %s", method, path, rec.Code, rec.Body)
		}
		if rec.Code < 300 || rec.Code == http.StatusMovedPermanently || rec.Code == http.StatusTemporaryRedirect || rec.Code == http.StatusPermanentRedirect {
			return
		}
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %q: %d, not JSON: %q", method, path, rec.Code, rec.Body)
		}
		if msg, _ := out["error"].(string); msg == "" {
			t.Fatalf("%s %q: %d without an error message: %q", method, path, rec.Code, rec.Body)
		}
	})
}
