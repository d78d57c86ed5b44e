package orchestrator_test

import (
	"net/http/httptest"
	"testing"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// The seed's follow-up: a prompt given while the conversation is paused
// goes into the follow-up run after the deferred results ("Now create a
// backup of README.md", sent with the decisions). A second prompt while
// the first waits is refused.
func TestFollowUpPromptWhilePaused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{})
	srv := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(srv.Close)
	c := startPaused(t, o)

	const prompt = "Now create a backup of README.md"
	status, body := doJSON(t, "POST", srv.URL+"/v1/runs", "", `{"prompt":"`+prompt+`","conversation_id":"`+c.ID+`"}`)
	runID, _ := body["run_id"].(string)
	if status != 202 || body["status"] != "queued" || runID == "" {
		t.Fatalf("prompt while paused: %d %v", status, body)
	}
	// Not started yet: queued, not paused.
	if status, body := doJSON(t, "GET", srv.URL+"/v1/runs/"+runID, "", ""); status != 200 || body["status"] != "queued" {
		t.Errorf("the queued run: %d %v", status, body)
	}
	if status, body := doJSON(t, "POST", srv.URL+"/v1/runs", "", `{"prompt":"and another","conversation_id":"`+c.ID+`"}`); status != 409 {
		t.Errorf("second prompt: %d %v, want 409", status, body)
	}

	e.worker()
	e.approverBot("bot", seedPolicy, nil)
	c = waitStatus(t, o, c.ID, conversation.StatusCompleted)
	if len(c.Runs) < 2 || c.Runs[1].RunID != runID || c.Runs[1].Prompt != prompt {
		t.Fatalf("runs %+v, want the follow-up %s with the prompt", c.Runs, runID)
	}
	// The follow-up's request: the results it has (the denied delete, the
	// README update; the approved .env update is deferred again to a
	// worker), then the prompt.
	req := c.History[2]
	var kinds []agent.PartKind
	for _, p := range req.Parts {
		kinds = append(kinds, p.Kind)
	}
	n := len(kinds)
	if n < 2 || kinds[n-1] != agent.PartUserPrompt || req.Parts[n-1].Content != prompt {
		t.Fatalf("follow-up request parts %v, want the results then the prompt", kinds)
	}
	for _, k := range kinds[:n-1] {
		if k != agent.PartToolReturn {
			t.Errorf("follow-up request parts %v, want the results then the prompt", kinds)
		}
	}
	if status, body := doJSON(t, "GET", srv.URL+"/v1/runs/"+runID, "", ""); status != 200 || body["status"] != string(c.Runs[1].Status) {
		t.Errorf("the follow-up run: %d %v", status, body)
	}
}
