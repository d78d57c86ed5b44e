package mcpexec

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/toolgate/toolgate/internal/worker/executor"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/mcptest"
	"github.com/toolgate/toolgate/internal/worker/callctx"
	"github.com/toolgate/toolgate/wire"
)

func newTestMCP(t *testing.T, cfg Config) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close MCP server: %v", err)
		}
	})
	return s
}

func mcpCall(tool, args string) wire.CallRequest {
	return wire.CallRequest{RunID: "r1", ConversationID: "c1", ToolCallID: "t1", ToolName: tool,
		Args: json.RawMessage(args), Deadline: time.Now().Add(time.Minute)}
}

func execMCP(t *testing.T, s *Server, req wire.CallRequest) wire.CallReply {
	t.Helper()
	r, err := s.Execute(t.Context(), req)
	if err != nil {
		t.Fatalf("%s: executor error: %v", req.ToolName, err)
	}
	if err := r.Validate(); err != nil && !strings.Contains(err.Error(), "run_id") {
		t.Fatalf("%s: invalid reply %+v: %v", req.ToolName, r, err)
	}
	return r
}

func TestMCPEverythingStdio(t *testing.T) {
	t.Parallel()
	s := newTestMCP(t, Config{Name: "everything", Command: mcptest.Everything(t), Prefix: "ev_"})

	tools := map[string]executor.Tool{}
	for _, tl := range s.Tools() {
		tools[tl.Spec.Name] = tl
	}
	for _, n := range []string{"ev_echo", "ev_get-sum", "ev_trigger-long-running-operation", "ev_get-tiny-image"} {
		if _, ok := tools[n]; !ok {
			t.Fatalf("tool %s not served; have %v", n, tools)
		}
	}
	var schema struct {
		Properties map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(tools["ev_get-sum"].Spec.Parameters, &schema); err != nil || schema.Properties["a"] == nil || schema.Properties["b"] == nil {
		t.Errorf("get-sum parameters = %s (%v), want the server's input schema with a and b", tools["ev_get-sum"].Spec.Parameters, err)
	}
	if tools["ev_echo"].Spec.Description == "" {
		t.Error("echo has no description")
	}
	a, ok := s.Advert("ev_echo")
	if !ok || a.MCPServer != "everything" || a.MCPTool != "echo" || len(a.Parameters) == 0 {
		t.Errorf("advert = %+v, %v; want server everything, tool echo, its schema", a, ok)
	}

	if r := execMCP(t, s, mcpCall("ev_echo", `{"message":"hi"}`)); r.Outcome != wire.OutcomeReturn || string(r.Value) != `"Echo: hi"` {
		t.Errorf("echo = %+v", r)
	}
	if r := execMCP(t, s, mcpCall("ev_get-sum", `{"a":2,"b":40}`)); r.Outcome != wire.OutcomeReturn || !strings.Contains(string(r.Value), "42") {
		t.Errorf("get-sum = %+v", r)
	}
	// Args the server refuses: a result with isError, which the model sees.
	if r := execMCP(t, s, mcpCall("ev_get-sum", `{"a":"two"}`)); r.Outcome != wire.OutcomeFailed || r.Message == "" {
		t.Errorf("get-sum with bad args = %+v, want failed with the server's message", r)
	}
	r := execMCP(t, s, mcpCall("ev_get-structured-content", `{"location":"Chicago"}`))
	var weather struct {
		Temperature float64 `json:"temperature"`
	}
	if r.Outcome != wire.OutcomeReturn || json.Unmarshal(r.Value, &weather) != nil || weather.Temperature != 36 {
		t.Errorf("structured content = %+v, want the structured value", r)
	}
	r = execMCP(t, s, mcpCall("ev_get-tiny-image", `{}`))
	if r.Outcome != wire.OutcomeReturn || !strings.Contains(r.Content, "data:image/png;base64,iVBOR") || !strings.Contains(string(r.Value), "image") {
		t.Errorf("image = value %s content %.120q, want the text as value and the image as a data URL in the content", r.Value, r.Content)
	}

	// Progress notifications reach the call's in-progress function.
	var progress atomic.Int32
	ctx := callctx.WithProgress(t.Context(), func() { progress.Add(1) })
	lr, err := s.Execute(ctx, mcpCall("ev_trigger-long-running-operation", `{"duration":0.3,"steps":3}`))
	if err != nil || lr.Outcome != wire.OutcomeReturn {
		t.Fatalf("long-running = %+v, %v", lr, err)
	}
	// The last one may be handled after the result: the client reads
	// notifications and responses on different paths.
	if n := progress.Load(); n < 2 {
		t.Errorf("progress notifications seen = %d, want at least 2 of 3", n)
	}

	// A deadline cancels the call: it fails as timed out, and the session
	// stays usable.
	req := mcpCall("ev_trigger-long-running-operation", `{"duration":30,"steps":30}`)
	req.Deadline = time.Now().Add(500 * time.Millisecond)
	start := time.Now()
	if r := execMCP(t, s, req); r.Outcome != wire.OutcomeFailed || r.Message != executor.TimedOutMessage {
		t.Errorf("call past its deadline = %+v, want failed %q", r, executor.TimedOutMessage)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the timed-out call took %v", took)
	}
	if r := execMCP(t, s, mcpCall("ev_echo", `{"message":"after"}`)); string(r.Value) != `"Echo: after"` {
		t.Errorf("echo after a cancelled call = %+v", r)
	}
}

func TestMCPCrashAndListChanged(t *testing.T) {
	t.Parallel()
	argv, env := mcptest.CrashServer(t)
	s := newTestMCP(t, Config{Name: "crashy", Command: argv, Env: env})
	changed := make(chan struct{}, 16)
	s.OnToolsChanged(func() { changed <- struct{}{} })

	pid1 := execMCP(t, s, mcpCall("whoami", `{}`)).Value
	r := execMCP(t, s, mcpCall("crash", `{}`))
	if r.Outcome != wire.OutcomeFailed || !strings.Contains(r.Message, "MCP server crashy stopped during the call") || !strings.Contains(r.Message, "not run again") ||
		!strings.Contains(r.Message, "exiting on purpose") {
		t.Errorf("crashing call = %+v, want failed saying the server stopped, with its stderr", r)
	}
	// The next call starts the server again.
	pid2 := execMCP(t, s, mcpCall("whoami", `{}`)).Value
	if string(pid1) == string(pid2) || len(pid2) == 0 {
		t.Errorf("whoami after the crash = %s, before = %s: want a new process", pid2, pid1)
	}

	if r := execMCP(t, s, mcpCall("add-tool", `{"name":"late_echo"}`)); r.Outcome != wire.OutcomeReturn {
		t.Fatalf("add-tool = %+v", r)
	}
	deadline := time.After(30 * time.Second)
	for {
		if _, ok := s.Advert("late_echo"); ok {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the tool added by the server was not picked up after tools/list_changed")
		}
	}
	r = execMCP(t, s, mcpCall("late_echo", `{"text":"x"}`))
	if r.Outcome != wire.OutcomeReturn || string(r.Value) != `{"echoed":{"text":"x"}}` {
		t.Errorf("late_echo = %+v", r)
	}
	if r := execMCP(t, s, mcpCall("not_there", `{}`)); r.Outcome != wire.OutcomeFailed || !strings.Contains(r.Message, "no longer offered") {
		t.Errorf("unknown tool = %+v", r)
	}
}

func TestMCPFilesystemSandbox(t *testing.T) {
	t.Parallel()
	sandbox := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("top secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	argv := []string{"node", filepath.Join(mcptest.NodeModules(t), "@modelcontextprotocol", "server-filesystem", "dist", "index.js"), sandbox}
	s := newTestMCP(t, Config{Name: "fs", Command: argv, Prefix: "fs_"})

	inside := filepath.Join(sandbox, "note.txt")
	args, _ := json.Marshal(map[string]string{"path": inside, "content": "hello"})
	if r := execMCP(t, s, mcpCall("fs_write_file", string(args))); r.Outcome != wire.OutcomeReturn {
		t.Fatalf("write_file inside the sandbox = %+v", r)
	}
	if b, err := os.ReadFile(inside); err != nil || string(b) != "hello" {
		t.Errorf("file written = %q, %v", b, err)
	}
	args, _ = json.Marshal(map[string]string{"path": filepath.Join(outside, "secret.txt")})
	r := execMCP(t, s, mcpCall("fs_read_text_file", string(args)))
	if r.Outcome != wire.OutcomeFailed || strings.Contains(r.Message, "top secret") {
		t.Errorf("read outside the sandbox = %+v, want failed without the content", r)
	}
}

func TestMCPStreamableHTTP(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("node", filepath.Join(mcptest.NodeModules(t), "@modelcontextprotocol", "server-everything", "dist", "index.js"), "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	stderr := &syncTail{t: executor.Tail{Max: 4096}}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	// Wait until it listens.
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	for !strings.Contains(stderr.String(), "listening on port") {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("server-everything streamableHttp exited: %v: %s", err, stderr.String())
		case <-time.After(20 * time.Millisecond):
		case <-t.Context().Done():
			return
		}
	}
	s := newTestMCP(t, Config{Name: "remote", URL: url, Header: http.Header{"Authorization": {"Bearer test-token"}}})
	if r := execMCP(t, s, mcpCall("echo", `{"message":"over http"}`)); string(r.Value) != `"Echo: over http"` {
		t.Errorf("echo over streamable HTTP = %+v", r)
	}
	var progress atomic.Int32
	ctx := callctx.WithProgress(t.Context(), func() { progress.Add(1) })
	if r, err := s.Execute(ctx, mcpCall("trigger-long-running-operation", `{"duration":0.2,"steps":2}`)); err != nil || r.Outcome != wire.OutcomeReturn {
		t.Errorf("long-running over HTTP = %+v, %v", r, err)
	}
	if n := progress.Load(); n < 1 {
		t.Errorf("progress over HTTP = %d, want at least 1 of 2", n)
	}
}

func TestHeaderTransport(t *testing.T) {
	t.Parallel()
	var got http.Header
	rt := headerTransport{header: http.Header{"Authorization": {"Bearer abc"}, "X-Team": {"a"}}, base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r.Header.Clone()
		return &http.Response{StatusCode: 204, Body: http.NoBody, Request: r}, nil
	})}
	req, _ := http.NewRequest(http.MethodPost, "http://x/mcp", nil)
	req.Header.Set("Authorization", "old")
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Get("Authorization") != "Bearer abc" || got.Get("X-Team") != "a" || req.Header.Get("Authorization") != "old" {
		t.Errorf("headers sent = %v (original request %v)", got, req.Header)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
