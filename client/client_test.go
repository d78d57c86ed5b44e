package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/client"
)

func TestNewRefusesBadURL(t *testing.T) {
	for _, u := range []string{"", "localhost:8080", "ftp://x", "http://"} {
		if _, err := client.New(client.Config{BaseURL: u}); err == nil || !strings.Contains(err.Error(), "base URL") {
			t.Errorf("%q: %v", u, err)
		}
	}
}

func TestCancelPostsToTheConversation(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Method + " " + r.URL.Path + " " + r.Header.Get("Authorization")
		if r.URL.Path == "/v1/conversations/gone/cancel" {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":"no conversation gone"}`)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()
	c, err := client.New(client.Config{BaseURL: srv.URL, Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(t.Context(), "c1"); err != nil {
		t.Fatal(err)
	}
	if got != "POST /v1/conversations/c1/cancel Bearer s3cret" {
		t.Errorf("request = %q", got)
	}
	var apiErr *client.APIError
	if err := c.Cancel(t.Context(), "gone"); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound || !strings.Contains(apiErr.Message, "no conversation") {
		t.Errorf("cancel of an unknown conversation: %v", err)
	}
	if _, err := c.Start(t.Context(), client.StartRequest{}); err == nil {
		t.Error("an empty prompt was sent")
	}
}

// Start, then wait for the conversation to end. (The orchestrator here is
// a stand-in that completes every conversation at once; toolgatetest
// starts a real one.)
func Example() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/runs":
			fmt.Fprint(w, `{"run_id":"r1_c1","conversation_id":"c1","status":"running"}`)
		case r.URL.Path == "/v1/conversations/c1":
			fmt.Fprint(w, `{"conversation_id":"c1","status":"completed","output":"42","runs":[],"pending":[],"messages":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer api.Close()

	c, _ := client.New(client.Config{BaseURL: api.URL})
	ctx := context.Background()
	run, err := c.Start(ctx, client.StartRequest{Prompt: "What is the answer?", IdempotencyKey: "question-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	conv, err := c.Wait(ctx, run.ConversationID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(conv.Status, string(conv.Output))
	// Output: completed "42"
}

// A start names its agent in the body, with the idempotency key in the
// header; a start without one sends no agent.
func TestStartNamesTheAgent(t *testing.T) {
	var bodies []string
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"run_id":"r1_c1","conversation_id":"c1","status":"running"}`)
	}))
	defer srv.Close()
	c, err := client.New(client.Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(t.Context(), client.StartRequest{Prompt: "hi", Agent: "support", IdempotencyKey: "k1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Start(t.Context(), client.StartRequest{Prompt: "hi"}); err != nil {
		t.Fatal(err)
	}
	if bodies[0] != `{"agent":"support","prompt":"hi"}` || keys[0] != "k1" {
		t.Errorf("start with an agent sent %s (key %q)", bodies[0], keys[0])
	}
	if strings.Contains(bodies[1], "agent") || keys[1] == "" {
		t.Errorf("start without an agent sent %s (key %q)", bodies[1], keys[1])
	}
}

// Go through every finished conversation, page after page, and delete
// those that completed. (The orchestrator here is a stand-in with two
// pages; toolgatetest starts a real one.)
func ExampleClient_Conversations() {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Query().Get("cursor") == "":
			fmt.Fprint(w, `{"conversations":[{"conversation_id":"c1","status":"completed"},{"conversation_id":"c2","status":"failed"}],"next_cursor":"7"}`)
		case r.Method == http.MethodGet:
			fmt.Fprint(w, `{"conversations":[{"conversation_id":"c3","status":"completed"}]}`)
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer api.Close()

	c, _ := client.New(client.Config{BaseURL: api.URL})
	ctx := context.Background()
	for conv, err := range c.Conversations(ctx, "") {
		if err != nil {
			fmt.Println(err)
			return
		}
		if conv.Status != client.StatusCompleted {
			continue
		}
		if err := c.Delete(ctx, conv.ConversationID); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("deleted", conv.ConversationID)
	}
	// Output:
	// deleted c1
	// deleted c3
}

// An audit record decided by a standing grant names it.
func TestAuditNamesTheGrant(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/audit" || r.URL.Query().Get("tool_call_id") != "call1" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, `{"records":[{"seq":3,"kind":"approval","verdict":"applied","run_id":"r1","tool_call_id":"call1","approver_id":"grant:g1","grant":"g1","reply_seq":0,"time":"2026-01-02T03:04:05Z"}]}`)
	}))
	defer srv.Close()
	c, err := client.New(client.Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	page, err := c.Audit(t.Context(), client.RecordOptions{ToolCallID: "call1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 1 || page.Records[0].Grant != "g1" || page.Records[0].Seq != 3 || page.Records[0].ApproverID != "grant:g1" {
		t.Errorf("records = %+v", page.Records)
	}
}
