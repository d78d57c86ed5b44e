package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolgate/toolgate/internal/client"
)

func TestReadSSE(t *testing.T) {
	t.Parallel()
	body := ": comment\nid: 1\nevent: tool_call\ndata: {\"a\":1}\n\nid: 2\ndata: line1\ndata: line2\n\n"
	var got []client.SSE
	for ev, err := range client.ReadSSE(bufio.NewReader(strings.NewReader(body))) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	want := []client.SSE{{ID: "1", Event: "tool_call", Data: `{"a":1}`}, {ID: "2", Data: "line1\nline2"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
}

func TestAPIErrorCarriesMessage(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(map[string]string{"error": "unknown conversation \"x\""})
	}))
	t.Cleanup(srv.Close)
	c := &client.Client{BaseURL: srv.URL}
	_, err := c.Conversation(context.Background(), "x")
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 404 || !strings.Contains(apiErr.Message, "unknown conversation") {
		t.Fatalf("err = %v, want a 404 APIError naming the conversation", err)
	}
}

func TestWriteTranscript(t *testing.T) {
	t.Parallel()
	msgs := []json.RawMessage{
		json.RawMessage(`{"request":[{"user":"Delete it"}]}`),
		json.RawMessage(`{"response":[{"call":{"tool":"delete_file","id":"d1","args":{"path":"a"}}},{"call":{"tool":"update_file","id":"u1","args":{"path":"b"},"original_args":{"path":"c"}}}]}`),
		json.RawMessage(`{"request":[{"return":{"tool":"delete_file","id":"d1","content":"Deleting files is not allowed","outcome":"denied"}}]}`),
		json.RawMessage(`{"response":[{"text":"Done."}]}`),
	}
	var b strings.Builder
	if err := client.WriteTranscript(&b, msgs); err != nil {
		t.Fatal(err)
	}
	want := "user      │ Delete it\n" +
		"assistant │ → delete_file({\"path\":\"a\"})  [d1]\n" +
		"assistant │ → update_file({\"path\":\"b\"})  [u1]  approved with edited args; the model asked {\"path\":\"c\"}\n" +
		"tool      │ ← delete_file denied: Deleting files is not allowed  [d1]\n" +
		"assistant │ Done.\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Fatalf("transcript (-want +got):\n%s", diff)
	}
}

// The conversation id is one path segment, and a long error body is cut
// short in the error.
func TestConversationPathAndLongError(t *testing.T) {
	t.Parallel()
	var path, accept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, accept = r.URL.EscapedPath(), r.Header.Get("Accept")
		w.WriteHeader(http.StatusBadGateway)
		w.Write([]byte(strings.Repeat("x", 5000)))
	}))
	t.Cleanup(srv.Close)
	c := &client.Client{BaseURL: srv.URL}
	_, err := c.Conversation(context.Background(), "a/b")
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadGateway || len(apiErr.Message) != 200 {
		t.Fatalf("err = %v, want a 502 APIError with 200 bytes of the body", err)
	}
	if path != "/v1/conversations/a%2Fb" || accept != "application/json" {
		t.Errorf("request path %q, Accept %q", path, accept)
	}
}

// A start whose answer is lost or refused for a passing reason is tried
// again under the same Idempotency-Key; a refusal that would not change is
// not.
func TestStartRunRetriesWithSameKey(t *testing.T) {
	var (
		mu   sync.Mutex
		keys []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		switch {
		case r.Header.Get("Authorization") != "":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"prompt: required"}`))
		case n == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"orchestrator is stopping"}`))
		case n == 2:
			// The answer is lost: the connection closes without one.
			hj, _ := w.(http.Hijacker)
			conn, _, _ := hj.Hijack()
			_ = conn.Close()
		default:
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"run_id":"r1","conversation_id":"c1","status":"running"}`))
		}
	}))
	t.Cleanup(srv.Close)
	c := &client.Client{BaseURL: srv.URL}
	rs, err := c.StartRun(t.Context(), "hi", "")
	if err != nil {
		t.Fatal(err)
	}
	if rs.RunID != "r1" {
		t.Fatalf("answer %+v", rs)
	}
	mu.Lock()
	if len(keys) != 3 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] {
		t.Errorf("keys sent: %q", keys)
	}
	keys = nil
	mu.Unlock()
	if _, err := (&client.Client{BaseURL: srv.URL, Token: "refused"}).StartRun(t.Context(), "hi", ""); err == nil {
		t.Fatal("a 400 was not reported")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 1 {
		t.Errorf("a 400 was tried %d times", len(keys))
	}
}

// Why a call or a conversation waits is printed with its reason, not as a
// bare event type.
func TestEventLineSaysWhyItWaits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ data, want string }{
		{`{"type":"tool_unserved","tool_call_id":"c1","data":{"tool":"t","reason":"no worker takes calls of t: the call waits until one does or its deadline passes"}}`,
			"⚠ no worker takes calls of t: the call waits until one does or its deadline passes  [c1]"},
		{`{"type":"agent_unavailable","data":{"agent":"a","reason":"no replica runs agent \"a\""}}`,
			`⚠ no replica runs agent "a"`},
	} {
		if got := client.EventLine(client.SSE{Data: tc.data}); got != tc.want {
			t.Errorf("EventLine(%s) = %q, want %q", tc.data, got, tc.want)
		}
	}
}
