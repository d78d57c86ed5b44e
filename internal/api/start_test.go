package api_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/toolgatetest"
)

// A prompt given while its conversation is paused is shown by GET
// /v1/conversations/{id} (queued_prompt) and its run, not started yet, is
// queued in GET /v1/runs/{id}, not paused.
func TestHTTPQueuedPrompt(t *testing.T) {
	t.Parallel()
	sys := toolgatetest.Start(t, toolgatetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()
	rs, err := sys.Client.Start(ctx, client.StartRequest{Prompt: seedPrompt})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Client.Wait(ctx, rs.ConversationID, client.StatusPaused); err != nil {
		t.Fatal(err)
	}
	status, body := doJSON(t, "POST", sys.URL+"/v1/runs", `{"prompt":"Now create a backup of README.md","conversation_id":"`+rs.ConversationID+`"}`)
	queuedRun, _ := body["run_id"].(string)
	if status != 202 || body["status"] != client.StatusQueued || queuedRun == "" {
		t.Fatalf("prompt while paused: %d %v, want 202 queued", status, body)
	}
	status, body = doJSON(t, "GET", sys.URL+"/v1/runs/"+queuedRun, "")
	if status != 200 || body["status"] != client.StatusQueued {
		t.Errorf("GET the queued run: %d %v, want queued", status, body)
	}
	conv, err := sys.Client.Conversation(ctx, rs.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	if q := conv.QueuedPrompt; q == nil || q.RunID != queuedRun || q.Prompt != "Now create a backup of README.md" {
		t.Errorf("queued_prompt = %+v, want run %s and its prompt", q, queuedRun)
	}
	status, body = doJSON(t, "GET", sys.URL+"/v1/runs/"+rs.RunID, "")
	if status != 200 || body["status"] != client.StatusPaused {
		t.Errorf("GET the paused run: %d %v, want paused", status, body)
	}
}

// A client may choose a new conversation's id: it is that id; the same id
// again is 409 (the repeat of the start that made it is answered as the
// start); an id of another form is 400.
func TestHTTPClientChosenConversationID(t *testing.T) {
	t.Parallel()
	sys := toolgatetest.Start(t, toolgatetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()
	start := client.StartRequest{Prompt: seedPrompt, NewConversationID: "corder17", IdempotencyKey: "k1"}
	rs, err := sys.Client.Start(ctx, start)
	if err != nil {
		t.Fatal(err)
	}
	if rs.ConversationID != "corder17" {
		t.Fatalf("conversation %s, want corder17", rs.ConversationID)
	}
	if _, err := sys.Client.Wait(ctx, "corder17", client.StatusPaused); err != nil {
		t.Fatal(err)
	}
	again, err := sys.Client.Start(ctx, start)
	if err != nil || again.RunID != rs.RunID || again.ConversationID != rs.ConversationID {
		t.Errorf("repeat of the start: %+v, %v; want run %s", again, err, rs.RunID)
	}
	var apiErr *client.APIError
	_, err = sys.Client.Start(ctx, client.StartRequest{Prompt: "another", NewConversationID: "corder17"})
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict || !strings.Contains(apiErr.Message, "already exists") {
		t.Errorf("another start with the id: %v, want 409 already exists", err)
	}
	if c, err := sys.Client.Conversation(ctx, "corder17"); err != nil || len(c.Runs) != 1 {
		t.Errorf("the conversation after a refused start: %+v, %v", c, err)
	}

	for _, tc := range []struct{ name, body, want string }{
		{"dash", `{"prompt":"hi","new_conversation_id":"order-17"}`, "new_conversation_id"},
		{"no c", `{"prompt":"hi","new_conversation_id":"order17"}`, "new_conversation_id"},
		{"too long", `{"prompt":"hi","new_conversation_id":"c` + strings.Repeat("x", 128) + `"}`, "new_conversation_id"},
		{"dot", `{"prompt":"hi","new_conversation_id":"c.x"}`, "new_conversation_id"},
		{"with conversation_id", `{"prompt":"hi","new_conversation_id":"cnew","conversation_id":"corder17"}`, "give one of them"},
	} {
		status, body := doJSON(t, "POST", sys.URL+"/v1/runs", tc.body)
		if msg, _ := body["error"].(string); status != 400 || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %d %v, want 400 naming %s", tc.name, status, body, tc.want)
		}
	}
}
