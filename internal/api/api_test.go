package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/toolgatetest"
)

// doJSON sends body (JSON, when not empty) and decodes the JSON answer.
func doJSON(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s %s: not JSON: %q", method, url, raw)
	}
	return resp.StatusCode, out
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
