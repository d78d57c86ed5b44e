package orchestrator_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/api/apitest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// A start repeated with its idempotency key answers with the run the first
// one started and starts nothing more; the key with another prompt is
// refused.
func TestStartIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{})
	req := orchestrator.StartRequest{Prompt: seedPrompt, IdempotencyKey: "order-17"}
	first, err := o.StartRunWith(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, first.ConversationID, conversation.StatusPaused)
	for range 3 {
		again, err := o.StartRunWith(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if again.RunID != first.RunID || again.ConversationID != first.ConversationID {
			t.Fatalf("repeat started %+v, first %+v", again, first)
		}
		if again.Status != conversation.StatusPaused {
			t.Errorf("repeat answers status %s, want the run's: paused", again.Status)
		}
	}
	after := waitStatus(t, o, first.ConversationID, conversation.StatusPaused)
	if len(after.Runs) != 1 || len(after.Batch.Calls) != len(c.Batch.Calls) {
		t.Errorf("repeats changed the conversation: %s", describe(after))
	}
	if n := o.Stats().RunsStarted.Load(); n != 1 {
		t.Errorf("runs started = %d, want 1", n)
	}

	_, err = o.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: "something else", IdempotencyKey: "order-17"})
	var reused *orchestrator.IdempotencyError
	if !errors.As(err, &reused) || !strings.Contains(err.Error(), "order-17") {
		t.Fatalf("key reused for another prompt: %v", err)
	}
	// Another key is another conversation.
	other, err := o.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: seedPrompt, IdempotencyKey: "order-18"})
	if err != nil {
		t.Fatal(err)
	}
	if other.ConversationID == first.ConversationID || other.RunID == first.RunID {
		t.Fatalf("another key gave the same ids: %+v", other)
	}
	// A paused conversation takes one prompt for its follow-up: its repeat
	// under the same key answers the same run, the key with another prompt
	// is refused, and a second prompt is a conflict.
	queue := orchestrator.StartRequest{Prompt: "go on", ConversationID: first.ConversationID, IdempotencyKey: "order-17"}
	queued, err := o.StartRunWith(ctxT(t), queue)
	if err != nil || queued.Status != conversation.StatusQueued {
		t.Fatalf("prompt while paused: %+v, %v", queued, err)
	}
	if again, err := o.StartRunWith(ctxT(t), queue); err != nil || again != queued {
		t.Errorf("repeat of the queued prompt: %+v, %v; want %+v", again, err, queued)
	}
	queue.Prompt = "go on, differently"
	if _, err := o.StartRunWith(ctxT(t), queue); !errors.As(err, &reused) || !strings.Contains(err.Error(), "order-17") {
		t.Errorf("queued key reused for another prompt: %v", err)
	}
	queue.IdempotencyKey = "order-19"
	var conflict *conversation.ConflictError
	if _, err := o.StartRunWith(ctxT(t), queue); !errors.As(err, &conflict) {
		t.Fatalf("a second prompt while paused: %v", err)
	}
}

// The first attempt's write landed but its answer was lost, so nothing
// launched the run: the retry with the same key launches it at once rather
// than leaving it to its lease running out.
func TestStartRetryLaunchesRunWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{InstanceID: "orch-1", LeaseTTL: time.Hour})
	const key = "lost-answer"
	convID := "c" + orchestrator.KeyedID("conversation", "", key)
	runID := "r" + orchestrator.KeyedID("run", "", key) + "_" + convID
	now := time.Now()
	state := conversation.State{
		ID: convID, Status: conversation.StatusRunning, CreatedAt: now, UpdatedAt: now,
		Runs:  []*conversation.RunRecord{{RunID: runID, Status: conversation.StatusRunning, Prompt: seedPrompt, StartedAt: now}},
		Lease: &conversation.Lease{Owner: "orch-1", RunID: runID, Until: now.Add(time.Hour)},
	}
	// Its first record, as the first attempt wrote it, and nothing the
	// write would have carried out.
	if err := o.StoreConversation(ctxT(t), &state); err != nil {
		t.Fatal(err)
	}
	info, err := o.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: seedPrompt, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	if info.RunID != runID || info.ConversationID != convID {
		t.Fatalf("retry answered %+v", info)
	}
	// The lease is an hour long: only the retry can have run it.
	c := waitStatus(t, o, convID, conversation.StatusPaused)
	if len(c.Runs) != 1 || c.Runs[0].RunID != runID {
		t.Errorf("runs: %s", describe(c))
	}
}

// The HTTP API takes the key as the Idempotency-Key header.
func TestHTTPIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{})
	srv := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(srv.Close)
	post := func(key, prompt string) (int, map[string]any) {
		t.Helper()
		return apitest.DoJSON(t, "POST", srv.URL+"/v1/runs", http.Header{"Idempotency-Key": {key}}, `{"prompt":"`+prompt+`"}`)
	}
	st1, first := post("k-1", "hello")
	st2, second := post("k-1", "hello")
	if st1 != http.StatusAccepted || st2 != http.StatusAccepted || first["run_id"] != second["run_id"] || first["conversation_id"] != second["conversation_id"] {
		t.Fatalf("repeat: %d %v, then %d %v", st1, first, st2, second)
	}
	if st, body := post("k-1", "bye"); st != http.StatusUnprocessableEntity || !strings.Contains(body["error"].(string), "k-1") {
		t.Errorf("key reused: %d %v", st, body)
	}
	if st, body := post("has space", "hello"); st != http.StatusBadRequest || !strings.Contains(body["error"].(string), "Idempotency-Key") {
		t.Errorf("bad key: %d %v", st, body)
	}
	if st, body := post(strings.Repeat("k", 256), "hello"); st != http.StatusBadRequest || !strings.Contains(body["error"].(string), "longer") {
		t.Errorf("long key: %d %v", st, body)
	}
}
