package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/api/apitest"
	"github.com/toolgate/toolgate/toolgatetest"
)

func doJSON(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	return apitest.DoJSON(t, method, url, nil, body)
}

// Bad requests are refused with the status and a message naming what is
// wrong, against a whole system (the demo agent) started by the test kit.
func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	sys := toolgatetest.Start(t, toolgatetest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()
	run, err := sys.Client.Start(ctx, client.StartRequest{Prompt: "Clean up the repository."})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Client.Wait(ctx, run.ConversationID, client.StatusPaused); err != nil {
		t.Fatal(err)
	}
	paused := run.ConversationID
	if _, err := sys.Client.Start(ctx, client.StartRequest{Prompt: "first", ConversationID: paused}); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name, method, path, body string
		status                   int
		want                     string
	}{
		{"bad json", "POST", "/v1/runs", `{"prompt":`, 400, "body"},
		{"not an object", "POST", "/v1/runs", `"hi"`, 400, "body"},
		{"unknown field", "POST", "/v1/runs", `{"prompt":"hi","history":[]}`, 400, `unknown field "history"`},
		{"empty prompt", "POST", "/v1/runs", `{"prompt":"  "}`, 400, "prompt: required"},
		{"trailing data", "POST", "/v1/runs", `{"prompt":"hi"} {}`, 400, "trailing"},
		{"too large", "POST", "/v1/runs", `{"prompt":"` + strings.Repeat("x", 2<<20) + `"}`, 413, "larger"},
		{"bad conversation id", "POST", "/v1/runs", `{"prompt":"hi","conversation_id":"a.b"}`, 400, "conversation_id"},
		{"caller not an object", "POST", "/v1/runs", `{"prompt":"hi","caller":"ann"}`, 400, "caller: not a JSON object"},
		{"caller too large", "POST", "/v1/runs", `{"prompt":"hi","caller":{"x":"` + strings.Repeat("x", 5<<10) + `"}}`, 400, "caller: larger than"},
		{"unknown conversation", "POST", "/v1/runs", `{"prompt":"hi","conversation_id":"nope"}`, 404, "not found"},
		{"second prompt while paused", "POST", "/v1/runs", `{"prompt":"hi","conversation_id":"` + paused + `"}`, 409, "already has a prompt"},
		{"get unknown conversation", "GET", "/v1/conversations/nope", "", 404, "not found"},
		{"get unknown run", "GET", "/v1/runs/nope", "", 404, "not found"},
		{"no such endpoint", "DELETE", "/v1/runs", "", 405, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := doJSON(t, tc.method, sys.URL+tc.path, tc.body)
			if status != tc.status {
				t.Errorf("status = %d, want %d (%v)", status, tc.status, body)
			}
			if msg, _ := body["error"].(string); tc.want != "" && !strings.Contains(msg, tc.want) {
				t.Errorf("error = %q, want it to contain %q", msg, tc.want)
			}
		})
	}
}

const seedPrompt = "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`"

// The API end to end through the public client, behind a bearer token:
// start, read the paused conversation with its pending calls and messages,
// read the run, list pending calls, follow the events from the start and
// from an id.
func TestHTTPConversation(t *testing.T) {
	t.Parallel()
	const token = "s3cret"
	sys := toolgatetest.Start(t, toolgatetest.Options{APIToken: token})
	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()

	if status, _ := doJSON(t, "GET", sys.URL+"/v1/pending", ""); status != 401 {
		t.Errorf("without a token: %d, want 401", status)
	}
	if status, _ := doJSON(t, "GET", sys.URL+"/healthz", ""); status != 200 {
		t.Errorf("healthz without a token: %d, want 200", status)
	}

	rs, err := sys.Client.Start(ctx, client.StartRequest{Prompt: seedPrompt})
	if err != nil {
		t.Fatal(err)
	}
	conv, err := sys.Client.Wait(ctx, rs.ConversationID, client.StatusPaused)
	if err != nil {
		t.Fatal(err)
	}
	if len(conv.Pending) != 3 {
		t.Fatalf("pending = %+v, want 3 calls", conv.Pending)
	}
	if len(conv.Messages) != 2 {
		t.Fatalf("messages = %s", conv.Messages)
	}
	if got := string(conv.Messages[0]); got != `{"request":[{"user":"`+seedPrompt+`"}]}` {
		t.Errorf("first message = %s", got)
	}
	if !strings.Contains(string(conv.Messages[1]), `{"call":{"tool":"delete_file","id":"delete_file","args":{"path":"__init__.py"}}}`) {
		t.Errorf("second message = %s", conv.Messages[1])
	}
	kinds := map[string]string{}
	for _, p := range conv.Pending {
		kinds[p.ToolCallID] = p.Kind
	}
	if kinds["delete_file"] != "approval" || kinds["update_file_dotenv"] != "approval" || kinds["update_file_readme"] != "call" {
		t.Errorf("pending kinds = %v", kinds)
	}
	if all, err := sys.Client.Pending(ctx); err != nil || len(all) != 3 {
		t.Errorf("pending = %v, %v", all, err)
	}
	req, err := http.NewRequestWithContext(ctx, "GET", sys.URL+"/v1/runs/"+rs.RunID, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var run map[string]any
	err = json.NewDecoder(resp.Body).Decode(&run)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || run["status"] != "paused" || run["conversation_id"] != rs.ConversationID {
		t.Errorf("run = %d %v %v", resp.StatusCode, run, err)
	}

	// Events: replayed from the start, then resumed after an id.
	var types, ids []string
	for ev, err := range sys.Client.Events(ctx, rs.ConversationID, "") {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, ev.Type)
		ids = append(ids, ev.ID)
		if ev.Type == "run_paused" {
			break
		}
	}
	want := []string{"run_started", "model_response", "tool_call", "tool_call", "tool_call", "deferred_requests", "run_done", "run_paused"}
	if strings.Join(types, ",") != strings.Join(want, ",") {
		t.Errorf("event types = %v, want %v", types, want)
	}
	for ev, err := range sys.Client.Events(ctx, rs.ConversationID, ids[len(ids)-2]) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type != "run_paused" || ev.ID != ids[len(ids)-1] {
			t.Errorf("after Last-Event-ID: %s %s, want %s run_paused", ev.ID, ev.Type, ids[len(ids)-1])
		}
		break
	}
}
