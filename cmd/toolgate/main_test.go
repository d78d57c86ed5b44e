package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/cli/clitest"
)

// fakeAPI answers like an orchestrator: POST /v1/runs records the prompt,
// a conversation is completed at once, any other id is 404.
type fakeAPI struct {
	mu      sync.Mutex
	prompts []string
	callers []string
	queries []string
	newIDs  []string
	pid     int
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/runs":
		var req struct {
			Prompt            string
			Caller            json.RawMessage
			NewConversationID string `json:"new_conversation_id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.prompts = append(f.prompts, req.Prompt)
		f.callers = append(f.callers, string(req.Caller))
		f.newIDs = append(f.newIDs, req.NewConversationID)
		f.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"run_id":"r1","conversation_id":"c1","status":"running"}`))
	case r.URL.Path == "/v1/conversations/c1":
		_, _ = w.Write([]byte(`{"conversation_id":"c1","status":"completed","output":"done","runs":[],"pending":[],"messages":[]}`))
	case r.URL.Path == "/v1/conversations":
		// Three pages, the second empty, as a page of a sparse status
		// may be.
		switch r.URL.Query().Get("cursor") {
		case "":
			_, _ = w.Write([]byte(`{"conversations":[{"conversation_id":"c1","status":"completed"}],"next_cursor":"5"}`))
		case "5":
			_, _ = w.Write([]byte(`{"conversations":[],"next_cursor":"9"}`))
		default:
			_, _ = w.Write([]byte(`{"conversations":[{"conversation_id":"c2","status":"completed"}]}`))
		}
	case r.URL.Path == "/v1/conversations/paused":
		_, _ = w.Write([]byte(`{"conversation_id":"paused","status":"paused","output":null,"runs":[],"pending":[],"messages":[]}`))
	case r.URL.Path == "/v1/conversations/stopped":
		_, _ = w.Write([]byte(`{"conversation_id":"stopped","status":"cancelled","error":"cancelled","output":null,"runs":[],"pending":[],"messages":[]}`))
	case r.URL.Path == "/v1/pending":
		_, _ = w.Write([]byte(`{"pending":[{"conversation_id":"c1","run_id":"r1","tool_call_id":"g1","tool_name":"delete_file","kind":"approval","args":{"path":"a.txt"},"deadline":"2099-01-01T00:00:00Z"}]}`))
	case r.URL.Path == "/v1/dlq":
		f.mu.Lock()
		f.queries = append(f.queries, r.URL.RawQuery)
		f.mu.Unlock()
		_, _ = w.Write([]byte(`{"dead_letters":[{"seq":7,"time":"2026-12-07T13:00:00Z","kind":"handler","reason":"unknown run","subject":"toolgate.reply.r1.decision","stream":"TOOLGATE_REPLIES","stream_seq":3,"conversation_id":"c1","tool_call_id":"g1"}],"next_cursor":"7"}`))
	case r.URL.Path == "/v1/audit":
		_, _ = w.Write([]byte(`{"records":[{"seq":4,"kind":"approval","verdict":"refused","reason":"wrong digest","conversation_id":"c1","run_id":"r1","tool_call_id":"g1","tool_name":"delete_file","approver_id":"ann","approved":true,"reply_seq":3,"time":"2026-12-07T13:00:00Z"}]}`))
	case r.URL.Path == "/healthz":
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "ok", "pid": f.pid})
	default:
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"not found"}`))
	}
}

func (f *fakeAPI) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.prompts...)
}

func start(t *testing.T) (*fakeAPI, string) {
	f := &fakeAPI{pid: os.Getpid() + 1}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL
}

func TestRunFlagsFollowTheCommand(t *testing.T) {
	f, url := start(t)
	var out bytes.Buffer
	if err := run(t.Context(), []string{"run", "-follow", "hello", "world", "--addr", url}, &out, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	if got := f.got(); len(got) != 1 || got[0] != "hello world" {
		t.Errorf("prompts = %q, want [hello world]", got)
	}
	if !strings.Contains(out.String(), "conversation c1: completed") {
		t.Errorf("--follow printed %q", out.String())
	}
}

// --caller goes into the start request as the JSON object it is.
func TestRunSendsTheCaller(t *testing.T) {
	f, url := start(t)
	var out bytes.Buffer
	if err := run(t.Context(), []string{"run", "--addr", url, "--caller", `{"user":"ann"}`, "hello"}, &out, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.callers) != 1 || f.callers[0] != `{"user":"ann"}` {
		t.Errorf("callers sent = %q", f.callers)
	}
}

func TestHelpPostsNothing(t *testing.T) {
	f, url := start(t)
	for _, args := range [][]string{{"run", "--help"}, {"--help"}, {"--version"}, {"watch", "-h"}} {
		var out bytes.Buffer
		err := run(t.Context(), append(args, "--addr", url), &out, &out)
		if !errors.Is(err, cli.ErrHelp) {
			t.Errorf("%q: err = %v, want ErrHelp (exit 0)", args, err)
		}
		if args[0] != "--version" && !strings.Contains(out.String(), "environment:\n  TOOLGATE_ADDR") {
			t.Errorf("%q: usage without its environment:\n%s", args, out.String())
		}
	}
	if got := f.got(); len(got) != 0 {
		t.Errorf("help posted prompts %q", got)
	}
}

func TestWatchUnknownIDFailsAtOnce(t *testing.T) {
	_, url := start(t)
	// With an hour to wait, only a refusal on the first 404 lets this end.
	err := run(t.Context(), []string{"watch", "nope", "--addr", url, "--wait", "1h"}, new(bytes.Buffer), new(bytes.Buffer))
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("err = %v, want the 404", err)
	}
}

func TestHealthPIDRefusesAnotherOrchestrator(t *testing.T) {
	_, url := start(t)
	err := run(t.Context(), []string{"health", "--pid", "1", "--addr", url, "--wait", "1h"}, new(bytes.Buffer), new(bytes.Buffer))
	if err == nil || !strings.Contains(err.Error(), "another server") {
		t.Errorf("err = %v, want another server", err)
	}
	// A process that has exited: nothing answers on a closed port.
	err = run(t.Context(), []string{"health", "--pid", "999999999", "--addr", "http://127.0.0.1:1", "--wait", "1h"}, new(bytes.Buffer), new(bytes.Buffer))
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("err = %v, want exited", err)
	}
}

// list --all goes through every page, empty ones too, a conversation a
// line.
func TestListAllGoesThroughThePages(t *testing.T) {
	_, url := start(t)
	var out bytes.Buffer
	if err := run(t.Context(), []string{"list", "--all", "--json", "--status", "completed", "--addr", url}, &out, &out); err != nil {
		t.Fatalf("list --all: %v\n%s", err, out.String())
	}
	var ids []string
	for line := range strings.Lines(out.String()) {
		var s struct {
			ConversationID string `json:"conversation_id"`
		}
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		ids = append(ids, s.ConversationID)
	}
	if strings.Join(ids, " ") != "c1 c2" {
		t.Errorf("list --all printed %q, want c1 and c2 a line each", out.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"run"}, {"watch"}, {"watch", "a", "b"}, {"pending", "x"}, {"run", "--nope", "p"}, {"list", "--all", "--limit", "5"}} {
		err := run(t.Context(), args, new(bytes.Buffer), new(bytes.Buffer))
		var ue *cli.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: err = %v, want a usage error", args, err)
		}
	}
}

func TestHelpAndVersion(t *testing.T) {
	clitest.CheckHelp(t, "toolgate", func(args []string, stdout *bytes.Buffer) error {
		return run(t.Context(), args, stdout, stdout)
	}, "TOOLGATE_ADDR", "TOOLGATE_TOKEN_FILE")
}

// pending, list, dlq and audit print tables, and JSON with --json.
func TestCommandsPrintTables(t *testing.T) {
	f, url := start(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"pending"}, []string{"TOOL CALL ID", "g1", "approval", "delete_file", `{"path":"a.txt"}`}},
		{[]string{"list"}, []string{"CONVERSATION", "STATUS", "c1", "completed", "more: --cursor 5"}},
		{[]string{"list", "--all"}, []string{"CONVERSATION", "c1", "c2"}},
		{[]string{"dlq", "--conversation", "c1", "--tool-call-id", "g1", "--since", "1h", "--limit", "5", "--cursor", "9"}, []string{"SEQ", "KIND", "handler", "toolgate.reply.r1.decision", "unknown run", "more: --cursor 7"}},
		{[]string{"audit"}, []string{"VERDICT", "refused", "ann", "approved wrong digest"}},
	} {
		var out, errOut bytes.Buffer
		if err := run(t.Context(), append(tc.args, "--addr", url), &out, &errOut); err != nil {
			t.Fatalf("%q: %v\n%s", tc.args, err, errOut.String())
		}
		if strings.Contains(out.String(), "{\"") && tc.args[0] != "pending" {
			t.Errorf("%q printed JSON:\n%s", tc.args, out.String())
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%q printed\n%s\nwant it to hold %q", tc.args, out.String(), w)
			}
		}
		var js bytes.Buffer
		if err := run(t.Context(), append(tc.args, "--json", "--addr", url), &js, &errOut); err != nil {
			t.Fatalf("%q --json: %v", tc.args, err)
		}
		dec := json.NewDecoder(&js)
		for dec.More() {
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Errorf("%q --json: not JSON: %v\n%s", tc.args, err, js.String())
				break
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queries) == 0 || f.queries[0] != "conversation=c1&cursor=9&limit=5&since=1h&tool_call_id=g1" {
		t.Errorf("dlq asked %q, want every filter passed on", f.queries)
	}
}

// watch --wait that runs out says so in words, on stderr's error, with
// the conversation's status; a cancelled conversation reads "cancelled",
// not "failed"; nothing of an error goes to stdout.
func TestWatchEndsInWords(t *testing.T) {
	_, url := start(t)
	var out, errOut bytes.Buffer
	err := run(t.Context(), []string{"watch", "paused", "--addr", url, "--wait", "300ms"}, &out, &errOut)
	want := "gave up waiting after 300ms; conversation paused is still paused"
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "deadline exceeded") {
		t.Errorf("err = %v, want %q", err, want)
	}
	if strings.Contains(out.String(), "events:") || strings.Contains(out.String(), "404") {
		t.Errorf("an error on stdout:\n%s", out.String())
	}
	if !strings.Contains(errOut.String(), "events:") {
		t.Errorf("stderr = %q, want the broken event stream told there", errOut.String())
	}

	err = run(t.Context(), []string{"watch", "stopped", "--addr", url}, new(bytes.Buffer), new(bytes.Buffer))
	if err == nil || err.Error() != "conversation stopped cancelled" {
		t.Errorf("err = %v, want conversation stopped cancelled", err)
	}
	var stderr bytes.Buffer
	if code := cli.ExitCode("toolgate", err, &stderr); code == 0 || !strings.Contains(stderr.String(), "cancelled") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}

// --new-id asks for the new conversation's id.
func TestRunSendsTheNewID(t *testing.T) {
	f, url := start(t)
	if err := run(t.Context(), []string{"run", "--addr", url, "--new-id", "corder17", "hello"}, new(bytes.Buffer), new(bytes.Buffer)); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.newIDs) != 1 || f.newIDs[0] != "corder17" {
		t.Errorf("new ids sent = %q", f.newIDs)
	}
}
