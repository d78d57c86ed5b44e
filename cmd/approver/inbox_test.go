package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
)

func TestInboxModeAndOneShotCommands(t *testing.T) {
	srv, err := bus.StartServer(bus.ServerConfig{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	b, err := srv.Connect(ctx, bus.ConnConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Setup(ctx, bus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	args := json.RawMessage(`{"path":"notes.txt"}`)
	digest, _ := bus.DigestArgs(args)
	if _, err := b.PublishApproval(ctx, bus.ApprovalRequest{
		RunID: "run-1", ConversationID: "conv-1", ToolCallID: "call-1", ToolName: "delete_file",
		Args: args, ArgsDigest: digest, Deadline: time.Now().Add(time.Hour),
	}); err != nil {
		t.Fatal(err)
	}

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	var logs syncWriter
	go func() {
		done <- run(runCtx, []string{"--nats", srv.ClientURL(), "--http", "127.0.0.1:0", "--http-token-file", tokenFile,
			"--id", "human"}, strings.NewReader(""), io.Discard, &logs)
	}()
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
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if base == "" {
			if m := urlRE.FindStringSubmatch(logs.String()); m != nil {
				base = m[1]
			}
		}
		if base != "" {
			if code, body := get("/api/pending"); code == http.StatusOK && strings.Contains(body, `"key":"run-1/call-1"`) {
				break
			}
		}
		select {
		case err := <-done:
			t.Fatalf("approver exited early: %v\n%s", err, logs.String())
		case <-ctx.Done():
			t.Fatalf("the inbox never listed the request\n%s", logs.String())
		case <-tick.C:
		}
	}

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

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after cancel: %v\n%s", err, logs.String())
		}
	case <-time.After(wait):
		t.Fatal("run did not return after cancel")
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
