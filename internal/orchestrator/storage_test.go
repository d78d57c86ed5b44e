package orchestrator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/disktest"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// On a store that runs out of room (a real 8 MiB tmpfs, so JetStream sizes
// its limit from the disk as it does in production), starts are refused
// with 503 naming the cause and /healthz says so; once room is back (here:
// conversations purged), both recover without a restart. Before, starts
// answered 500 "internal error" and /healthz stayed ok.
func TestStorageFullRefusesStartsAndRecovers(t *testing.T) {
	dir := disktest.Tmpfs(t, "8m")
	e := envWith(t, filepath.Join(dir, "store"), embedded.ServerConfig{})
	e.dir = dir
	o, _ := e.orch(orchestrator.Config{})
	hs := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(hs.Close)

	prompt := `{"prompt":"` + strings.Repeat("p", api.MaxPromptBytes-16) + `"}`
	var status int
	var body map[string]any
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatalf("100 starts of %d bytes on an 8 MiB store all taken", len(prompt))
		}
		if status, body = doJSON(t, "POST", hs.URL+"/v1/runs", "", prompt); status != http.StatusAccepted {
			break
		}
	}
	if msg, _ := body["error"].(string); status != http.StatusServiceUnavailable || !strings.Contains(msg, "storage full") {
		t.Fatalf("start on a full store: %d %v, want 503 storage full", status, body)
	}
	if status, body := doJSON(t, "GET", hs.URL+"/healthz", "", ""); status != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(body["error"]), "storage full") {
		t.Errorf("/healthz on a full store: %d %v", status, body)
	}

	st, err := e.connect("operator").JetStream().Stream(ctxT(t), bus.StreamConversations)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	bustest.Poll(t, bustest.Timeout, "/healthz ok again", func() (bool, string) {
		status, body := doJSON(t, "GET", hs.URL+"/healthz", "", "")
		return status == http.StatusOK, fmt.Sprint(status, body)
	})
	if status, body := doJSON(t, "POST", hs.URL+"/v1/runs", "", `{"prompt":"hello again"}`); status != http.StatusAccepted {
		t.Errorf("start once room is back: %d %v", status, body)
	}
}

// At the storage limit a DELETE frees room: it answers 204 where it
// answered 503 like a start (its tombstone could not be written, so the
// API had no way to free room), the deleted conversation is gone, and a
// start of the size refused before is taken again.
func TestDeleteFreesRoomAtTheStorageLimit(t *testing.T) {
	dir := disktest.Tmpfs(t, "8m")
	e := envWith(t, filepath.Join(dir, "store"), embedded.ServerConfig{})
	e.dir = dir
	o, _ := e.orch(orchestrator.Config{Model: pauseModel})
	hs := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(hs.Close)

	prompt := `{"prompt":"` + strings.Repeat("p", api.MaxPromptBytes-16) + `"}`
	var ids []string
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatalf("100 starts of %d bytes on an 8 MiB store all taken", len(prompt))
		}
		status, body := doJSON(t, "POST", hs.URL+"/v1/runs", "", prompt)
		if status != http.StatusAccepted {
			if msg, _ := body["error"].(string); status != http.StatusServiceUnavailable || !strings.Contains(msg, "storage full") {
				t.Fatalf("start on a full store: %d %v, want 503 storage full", status, body)
			}
			break
		}
		ids = append(ids, fmt.Sprint(body["conversation_id"]))
	}
	if len(ids) < 3 {
		t.Fatalf("%d starts taken before the store was full, want at least 3", len(ids))
	}
	for _, id := range ids[:3] {
		waitStatus(t, o, id, conversation.StatusCompleted)
		if status := statusOf(t, "DELETE", hs.URL+"/v1/conversations/"+id); status != http.StatusNoContent {
			t.Fatalf("delete at the storage limit: %d, want 204", status)
		}
		if status, body := doJSON(t, "GET", hs.URL+"/v1/conversations/"+id, "", ""); status != http.StatusNotFound {
			t.Errorf("get after delete: %d %v, want 404", status, body)
		}
	}
	if status, body := doJSON(t, "POST", hs.URL+"/v1/runs", "", prompt); status != http.StatusAccepted {
		t.Errorf("start once deletes freed room: %d %v", status, body)
	}
}

// tmpfsStore mounts a tmpfs of size and starts a server whose store is on
// it, reopened as soon as it has room again; it skips the test where
// mounting is not allowed (not root).
func tmpfsStore(t *testing.T, size string) (*env, string) {
	t.Helper()
	dir := disktest.Tmpfs(t, size)
	e := envWith(t, filepath.Join(dir, "store"), embedded.ServerConfig{MinFreeBytes: 4 << 20, StoreCheckInterval: 50 * time.Millisecond})
	e.dir = dir
	return e, dir
}

// A disk that fills below the server's storage limit (here: a file takes
// the rest of the tmpfs after the server sized its limit from it) makes
// nats-server keep the stream's write error and answer none of its
// publishes while the stream stays open. A start then answers 503 naming
// the cause (before: a 500 "internal error" after the write's timeout),
// later starts are refused at once, and /healthz says so and what clears
// it. Once room is back the embedded server reopens its store, without a
// restart (before: the error stayed until one): /healthz is ok again, a
// new start is taken and finishes through a worker and the reply path,
// and a conversation accepted before the disk filled, whose call's reply
// came while it was full, finishes too.
func TestDiskFullBelowTheLimitIsSaidAndRecovers(t *testing.T) {
	e, dir := tmpfsStore(t, "16m")
	// The worker takes the call of the conversation accepted before the
	// disk fills, and answers it only once it is full: neither its reply
	// nor what the reply changes can then be stored. (A worker that starts
	// on a full disk cannot make its consumer and stops.)
	ran, answer := make(chan struct{}, 8), make(chan struct{})
	exec := worker.ExecutorFunc(func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
		ran <- struct{}{}
		select {
		case <-answer:
		case <-ctx.Done():
			return wire.CallReply{}, ctx.Err()
		}
		return worker.ReturnValue(json.RawMessage("42")), nil
	})
	spec := worker.ToolSpec{Name: "calculate_answer", Parameters: json.RawMessage(`{"type":"object"}`)}
	w, err := worker.New(worker.Config{Bus: e.connect("worker"), Tools: []worker.Tool{{Spec: spec, Executor: exec, Kind: "test"}}, ID: "w1", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	e.run("worker", w.Run)
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, ""), ServerWriteError: e.srv().WriteError})
	hs := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(hs.Close)
	status, body := doJSON(t, "POST", hs.URL+"/v1/runs", "", `{"prompt":"before"}`)
	if status != http.StatusAccepted {
		t.Fatalf("start with room: %d %v", status, body)
	}
	before, _ := body["conversation_id"].(string)
	waitStatus(t, o, before, conversation.StatusPaused)
	bustest.Recv(t, ran, "the call of the conversation accepted before, at the worker")

	filler := filepath.Join(dir, "filler")
	disktest.Fill(t, filler)

	prompt := `{"prompt":"` + strings.Repeat("p", 64<<10) + `"}`
	status, body = doJSON(t, "POST", hs.URL+"/v1/runs", "", prompt)
	if msg := fmt.Sprint(body["error"]); status != http.StatusServiceUnavailable || !strings.Contains(msg, "no space left on device") || !strings.Contains(msg, "reopened once its filesystem has 4.0 MiB free") {
		t.Fatalf("start on a full disk below the limit: %d %v, want 503 naming the cause and what clears it", status, body)
	}
	// The next start does not try to write: it asks the server first.
	writes := o.Stats().StateWrites.Load()
	if status, body := doJSON(t, "POST", hs.URL+"/v1/runs", "", `{"prompt":"again"}`); status != http.StatusServiceUnavailable {
		t.Errorf("second start on a full disk: %d %v, want 503", status, body)
	}
	if got := o.Stats().StateWrites.Load(); got != writes {
		t.Errorf("the second start tried %d writes, want none", got-writes)
	}
	if status, body := doJSON(t, "GET", hs.URL+"/healthz", "", ""); status != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(body["error"]), "write error") {
		t.Errorf("/healthz on a full disk below the limit: %d %v", status, body)
	}
	close(answer)
	// Either the reply is not stored (the worker gets no answer and runs
	// the call again later) or it is, and the conversation's log does not
	// take what it changes; either way the conversation stays paused.
	ops := e.connect("operator")
	waitFor(t, "the worker's reply stored, or the call back at the worker", func() (bool, string) {
		n := bustest.StreamMsgs(t, ops, wire.StreamReplies)
		return n > 0 || len(ran) > 0, fmt.Sprintf("replies stored %d, runs again %d", n, len(ran))
	})
	if c, err := o.Conversation(ctxT(t), before); err != nil || c.Status != conversation.StatusPaused {
		t.Fatalf("the conversation accepted before, on a full disk: %v %v, want still paused", c, err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/healthz ok once room is back", func() (bool, string) {
		status, body := doJSON(t, "GET", hs.URL+"/healthz", "", "")
		return status == http.StatusOK, fmt.Sprint(status, body)
	})
	if n := e.srv().StoreReopens(); n != 1 {
		t.Errorf("the store was reopened %d times, want 1", n)
	}
	c := waitStatus(t, o, before, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || !strings.Contains(c.Output, "42") {
		t.Errorf("the conversation accepted before the disk filled: %s", describe(c))
	}
	status, body = doJSON(t, "POST", hs.URL+"/v1/runs", "", `{"prompt":"after"}`)
	if status != http.StatusAccepted {
		t.Fatalf("start once room is back: %d %v", status, body)
	}
	after, _ := body["conversation_id"].(string)
	c = waitStatus(t, o, after, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || !strings.Contains(c.Output, "42") {
		t.Errorf("a conversation started once room is back: %s", describe(c))
	}
}

// A run under way when the disk fills cannot store its end (its answer
// needs room the disk no longer has). While the disk is full the
// conversation keeps its last stored status, running, since nothing can be
// stored, a failure neither, and /healthz says why; the run's end is
// followed up, its outcome unknown (the server answers no publish of the
// stream). Once room is back the store is reopened and the conversation
// completes with the run's answer: its end stored by the follow-up, or by
// the run that reconcile relaunched once the lease expired, whichever
// comes first (the other finds the log moved). Before, the server kept its
// write error until a restart, and the conversation stayed running for
// good.
func TestDiskFullRunUnderWayFinishesOnceRoomIsBack(t *testing.T) {
	e, dir := tmpfsStore(t, "16m")
	answer := strings.Repeat("a", 64<<10)
	entered, gate := make(chan struct{}, 4), make(chan struct{})
	var requests atomic.Int32
	model := agent.FunctionModel("gated", func(ctx context.Context, _ agent.ModelRequest) (agent.ModelResponse, error) {
		if requests.Add(1) == 1 {
			entered <- struct{}{}
			select {
			case <-gate:
			case <-ctx.Done():
				return agent.ModelResponse{}, ctx.Err()
			}
		}
		return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: answer}}}, nil
	})
	reg := telemetry.NewRegistry()
	o, _ := e.orch(orchestrator.Config{Model: model, ServerWriteError: e.srv().WriteError, Metrics: telemetry.NewOrchestratorMetrics(reg),
		LeaseTTL: 3 * time.Second, ReconcileInterval: 500 * time.Millisecond})
	info, err := o.StartRun(ctxT(t), "hi", "")
	if err != nil {
		t.Fatal(err)
	}
	bustest.Recv(t, entered, "the run at the model")

	filler := filepath.Join(dir, "filler")
	disktest.Fill(t, filler)
	close(gate)
	waitFor(t, "the run's end followed up, its outcome unknown", func() (bool, string) {
		n := o.Stats().AppendsUnresolved.Load()
		return n >= 1, fmt.Sprintf("%d rounds", n)
	})
	if c, err := o.Conversation(ctxT(t), info.ConversationID); err != nil || c.Status != conversation.StatusRunning {
		t.Fatalf("the conversation on a full disk: %v %v, want running as last stored", c, err)
	}
	if err := o.Health(ctxT(t)); err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("health on a full disk: %v, want the write error", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || c.Output != answer {
		t.Errorf("the conversation once room is back: status %s, error %q, output of %d bytes", c.Status, c.Error, len(c.Output))
	}
	if err := o.Health(ctxT(t)); err != nil {
		t.Errorf("health once room is back: %v", err)
	}
}
