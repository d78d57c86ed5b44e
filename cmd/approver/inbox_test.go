package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/bus/bustest"
)

func TestInboxModeAndOneShotCommands(t *testing.T) {
	srv := bustest.NewServer(t)
	b := bustest.Connect(t, srv, "test")
	bustest.Setup(t, b)
	publishApproval(t, b, `{"path":"notes.txt"}`)
	ctx := bustest.Context(t)

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := start(t, "--nats", srv.ClientURL(), "--http", "127.0.0.1:0", "--http-token-file", tokenFile, "--id", "human")
	urlRE := regexp.MustCompile(`url=(http://[0-9.:]+)/`)
	var base string
	get := func(path string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	bustest.Poll(t, bustest.Timeout, "the inbox to list the request", func() (bool, string) {
		r.checkRunning(t)
		if base == "" {
			if m := urlRE.FindStringSubmatch(r.logs.String()); m != nil {
				base = m[1]
			}
		}
		if base == "" {
			return false, r.logs.String()
		}
		code, body := get("/api/pending")
		return code == http.StatusOK && strings.Contains(body, `"key":"run-1/call-1"`), r.logs.String()
	})

	var out bytes.Buffer
	if err := run(ctx, []string{"list", "--nats", srv.ClientURL()}, nil, &out, io.Discard); err != nil {
		t.Fatalf("list: %v", err)
	}
	if !strings.Contains(out.String(), "call-1") || !strings.Contains(out.String(), "delete_file") {
		t.Errorf("list printed:\n%s", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"deny", "call-1", "--message", "keep my notes", "--nats", srv.ClientURL(), "--id", "cli"}, nil, &out, io.Discard); err != nil {
		t.Fatalf("deny: %v", err)
	}
	if !strings.Contains(out.String(), "denied run-1/call-1: keep my notes (unsigned)") {
		t.Errorf("deny printed %q", out.String())
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("healthz = %d", code)
	}

	if err := r.stop(); err != nil {
		t.Errorf("run after cancel: %v\n%s", err, r.logs.String())
	}
}

func TestInboxAndOneShotFlagsRefused(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--http", "0.0.0.0:0"},                               // beyond loopback without a token
		{"--http", "127.0.0.1:0", "--http-token-file", empty}, // a token file without a token
		{"--http", "127.0.0.1:0", "--http-token-file", "/nonexistent"},
		{"deny", "call-1"},       // no message
		{"approve"},              // no id
		{"approve", "a", "b"},    // two ids
		{"list", "--args", `{}`}, // --args is for approve
		{"deny", "call-1", "--args", `{}`, "--message", "x"},
	} {
		if err := run(t.Context(), args, strings.NewReader(""), io.Discard, io.Discard); err == nil {
			t.Errorf("run(%q) succeeded", args)
		}
	}
}
