package orchestrator_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/api/apitest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// An Idempotency-Key names one request: its repeat with another agent or
// another caller is refused 422 like one with another prompt, not answered
// with the first request's conversation as if it were that one's.
func TestIdempotencyKeyWithAnotherAgentOrCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alpha, _ := namedAgent(t, "alpha", "")
	beta, _ := namedAgent(t, "beta", "")
	e.worker("calculate_answer")
	o, _ := e.orch(orchestrator.Config{Agents: []*orchestrator.AgentConfig{alpha, beta}})
	srv := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(srv.Close)
	post := func(key, body string) (int, map[string]any) {
		t.Helper()
		return apitest.DoJSON(t, "POST", srv.URL+"/v1/runs", http.Header{"Idempotency-Key": {key}}, body)
	}
	const start = `{"prompt":"What is the answer?","agent":"alpha","caller":{"user":"ann","tenant":"t1"}}`
	st, first := post("k-1", start)
	if st != http.StatusAccepted {
		t.Fatalf("start: %d %v", st, first)
	}
	for _, tc := range []struct {
		name, body string
		status     int
	}{
		{"the same request", start, http.StatusAccepted},
		{"the same caller, spaced and ordered otherwise", `{"prompt":"What is the answer?","agent":"alpha","caller":{ "tenant": "t1", "user": "ann" }}`, http.StatusAccepted},
		{"another agent", `{"prompt":"What is the answer?","agent":"beta","caller":{"user":"ann","tenant":"t1"}}`, http.StatusUnprocessableEntity},
		{"another caller", `{"prompt":"What is the answer?","agent":"alpha","caller":{"user":"bob","tenant":"t1"}}`, http.StatusUnprocessableEntity},
		{"no caller", `{"prompt":"What is the answer?","agent":"alpha"}`, http.StatusUnprocessableEntity},
		{"another prompt", `{"prompt":"What else?","agent":"alpha","caller":{"user":"ann","tenant":"t1"}}`, http.StatusUnprocessableEntity},
	} {
		st, body := post("k-1", tc.body)
		if st != tc.status {
			t.Errorf("%s: %d %v, want %d", tc.name, st, body, tc.status)
			continue
		}
		if st == http.StatusAccepted && (body["run_id"] != first["run_id"] || body["conversation_id"] != first["conversation_id"]) {
			t.Errorf("%s: answered %v, want the first start's %v", tc.name, body, first)
		}
		if st == http.StatusUnprocessableEntity && !strings.Contains(body["error"].(string), "k-1") {
			t.Errorf("%s: %v, want the key named", tc.name, body)
		}
	}
	conv := first["conversation_id"].(string)
	waitStatus(t, o, conv, conversation.StatusCompleted)

	// A prompt that continues the conversation likewise.
	next := `{"prompt":"And again?","conversation_id":"` + conv + `","caller":{"user":"ann"}}`
	st, second := post("k-2", next)
	if st != http.StatusAccepted {
		t.Fatalf("continue: %d %v", st, second)
	}
	if st, body := post("k-2", next); st != http.StatusAccepted || body["run_id"] != second["run_id"] {
		t.Errorf("repeat of the continuation: %d %v, want %v", st, body, second)
	}
	if st, body := post("k-2", `{"prompt":"And again?","conversation_id":"`+conv+`","caller":{"user":"bob"}}`); st != http.StatusUnprocessableEntity {
		t.Errorf("continuation's key with another caller: %d %v, want 422", st, body)
	}
	if n := o.Stats().RunsStarted.Load(); n != 2 {
		t.Errorf("runs started = %d, want 2", n)
	}
}
