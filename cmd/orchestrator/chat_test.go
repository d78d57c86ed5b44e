package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The orchestrator serves the chat page without the API's token (a
// browser cannot send one when it opens the page), while the API, the
// AG-UI endpoint the page posts to included, still wants it.
func TestChatPageServed(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	natsAddr, httpAddr := loopbackAddr(t), loopbackAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var log lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--store", filepath.Join(dir, "data"), "--nats-listen", natsAddr, "--http", httpAddr,
			"--http-token-file", tokenFile, "--shutdown-timeout", "5s"}, io.Discard, &log, noEnv)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("orchestrator: %v\n%s", err, log.String())
			}
		case <-time.After(authWait):
			t.Errorf("orchestrator did not stop")
		}
	})
	base := "http://" + httpAddr
	get := func(path, token string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	waitUntil(t, "the orchestrator to serve", func() bool {
		resp, _ := get("/healthz", "")
		return resp != nil && resp.StatusCode == http.StatusOK
	}, &log)

	if resp, body := get("/chat", ""); resp.StatusCode != http.StatusOK || !strings.Contains(body, "chat.js") {
		t.Errorf("GET /chat without a token: %d %.200s", resp.StatusCode, body)
	}
	if resp, body := get("/chat/assets/chat.js", ""); resp.StatusCode != http.StatusOK || !strings.Contains(body, "/v1/agui") {
		t.Errorf("GET /chat/assets/chat.js without a token: %d", resp.StatusCode)
	}
	if resp, _ := get("/v1/pending", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /v1/pending without a token: %d, want 401", resp.StatusCode)
	}
	if resp, _ := get("/v1/pending", "s3cret"); resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/pending with the token: %d, want 200", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/agui", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /v1/agui without a token: %d, want 401", resp.StatusCode)
	}
}
