package api_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/schemas"
	"github.com/toolgate/toolgate/toolgatetest"
)

// What the API answers for a run, the pending calls and a conversation is
// what schemas/run, pending and conversation.schema.json say, read from
// the server as a client in another language would.
func TestAnswersFitTheirSchemas(t *testing.T) {
	t.Parallel()
	sys := toolgatetest.Start(t, toolgatetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()
	get := func(method, path, body, schema string) []byte {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, sys.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode/100 != 2 {
			t.Fatalf("%s %s: %d %s %v", method, path, resp.StatusCode, b, err)
		}
		if err := schemas.Validate(schema, b); err != nil {
			t.Errorf("%s %s answers %s: %v", method, path, b, err)
		}
		return b
	}
	if b := get("GET", "/v1/pending", "", "pending"); !strings.Contains(string(b), `"pending":[]`) {
		t.Errorf("nothing pending: %s", b)
	}
	rs, err := sys.Client.Start(ctx, client.StartRequest{Prompt: seedPrompt})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Client.Wait(ctx, rs.ConversationID, client.StatusPaused); err != nil {
		t.Fatal(err)
	}
	get("GET", "/v1/runs/"+rs.RunID, "", "run")
	get("GET", "/v1/pending", "", "pending")
	get("GET", "/v1/conversations/"+rs.ConversationID, "", "conversation")
	// A prompt given while the conversation is paused: a queued run.
	get("POST", "/v1/runs", `{"prompt": "then this", "conversation_id": "`+rs.ConversationID+`"}`, "run")
}
