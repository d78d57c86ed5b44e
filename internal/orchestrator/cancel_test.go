package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// A paused conversation is cancelled over HTTP: its approvals are denied
// and its external call failed as cancelled, an event says so, and a second
// cancel, of a finished conversation, is refused.
func TestCancelPausedConversation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{})
	srv := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(srv.Close)
	c := startPaused(t, o)

	status, body := doJSON(t, "POST", srv.URL+"/v1/conversations/"+c.ID+"/cancel", "", "")
	if status != 202 || body["status"] != "cancelled" {
		t.Fatalf("cancel: %d %v", status, body)
	}
	c, err := o.Conversation(ctxT(t), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Status != conversation.StatusCancelled {
		t.Fatalf("status %s, want cancelled", c.Status)
	}
	for _, pc := range c.Batch.Calls {
		want := conversation.OutcomeFailed
		if pc.Kind == "approval" {
			want = conversation.OutcomeDenied
		}
		if pc.Reply == nil || !pc.Reply.Cancelled || pc.Reply.Outcome != want || pc.Reply.Message != conversation.CancelledMessage {
			t.Errorf("call %s: reply %+v, want %s cancelled", pc.ToolCallID, pc.Reply, want)
		}
	}
	evs := collectEvents(t, e.connect("events"), c.ID, hasEvent(orchestrator.EventConversationCancelled, ""))
	ev, _ := event(evs, orchestrator.EventConversationCancelled, "")
	if ev.RunID != c.Batch.RunID || len(eventData(t, ev)["tool_call_ids"].([]any)) != 3 {
		t.Errorf("event %+v, want the paused run and its 3 calls", ev)
	}

	for _, tc := range []struct {
		id   string
		code int
		want string
	}{{c.ID, 409, "already cancelled"}, {"nope", 404, "not found"}} {
		status, body = doJSON(t, "POST", srv.URL+"/v1/conversations/"+tc.id+"/cancel", "", "")
		if msg, _ := body["error"].(string); status != tc.code || !strings.Contains(msg, tc.want) {
			t.Errorf("cancel %s: %d %v, want %d %q", tc.id, status, body, tc.code, tc.want)
		}
	}
	// A cancelled conversation takes a new prompt: the run sends it after
	// the cancelled results, so the model sees every call answered.
	if _, err := o.StartRun(ctxT(t), "never mind", c.ID); err != nil {
		t.Fatalf("new prompt after cancel: %v", err)
	}
	c = waitStatus(t, o, c.ID, conversation.StatusCompleted)
	last := c.History[len(c.History)-2]
	var returns, prompts int
	for _, p := range last.Parts {
		switch {
		case p.Kind == agent.PartToolReturn:
			returns++
		case p.Kind == agent.PartUserPrompt && p.Content == "never mind":
			prompts++
		}
	}
	if returns != 3 || prompts != 1 {
		t.Errorf("the new run's request has %d results and %d prompts, want 3 and 1: %+v", returns, prompts, last.Parts)
	}
}

// A reply and a cancel race for one call: whichever is written first wins
// and the other sees it. The reply after the cancel is refused as late,
// recorded on the call and dead-lettered; the cancel after the reply keeps
// the reply and settles the rest. Run in both orders and at once.
func TestCancelRacesReply(t *testing.T) {
	t.Parallel()
	for _, order := range []string{"cancel first", "reply first", "at once"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			o, _ := e.orch(orchestrator.Config{})
			b := e.connect("test")
			c := startPaused(t, o)
			runID := c.Batch.RunID
			reply := func() {
				publishRaw(t, b, callSubject(t, runID), "r-"+order, wire.CallReply{
					RunID: runID, ToolCallID: "update_file_readme", Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"done"`), WorkerID: "w",
				})
			}
			var cancelErr error
			cancel := func() { _, cancelErr = o.Cancel(ctxT(t), c.ID) }
			switch order {
			case "cancel first":
				cancel()
				reply()
			case "reply first":
				reply()
				waitCall(t, o, c.ID, "update_file_readme", "the reply to be applied", func(pc *conversation.PendingCall) bool { return pc.Reply != nil })
				cancel()
			default:
				var wg sync.WaitGroup
				wg.Go(reply)
				wg.Go(cancel)
				wg.Wait()
			}
			if cancelErr != nil {
				t.Fatalf("cancel: %v", cancelErr)
			}
			waitFor(t, "the reply's verdict", func() (bool, string) {
				s := o.Stats()
				return s.RepliesApplied.Load()+s.Late.Load() == 1, fmt.Sprintf("applied %d late %d", s.RepliesApplied.Load(), s.Late.Load())
			})
			c = waitStatus(t, o, c.ID, conversation.StatusCancelled)
			pc := pendingCall(t, c, "update_file_readme")
			applied, late := o.Stats().RepliesApplied.Load(), o.Stats().Late.Load()
			switch {
			case applied == 1 && late == 0:
				if pc.Reply.Cancelled || string(pc.Reply.Value) != `"done"` {
					t.Errorf("reply applied, but the call holds %+v", pc.Reply)
				}
				if order == "cancel first" {
					t.Error("a reply after the cancel was applied")
				}
			case applied == 0 && late == 1:
				if !pc.Reply.Cancelled || pc.Late != 1 || !strings.Contains(pc.LastRefusal, "was cancelled") {
					t.Errorf("reply refused, but the call holds %+v (late %d, %q)", pc.Reply, pc.Late, pc.LastRefusal)
				}
				if order == "reply first" {
					t.Error("a reply applied before the cancel was undone")
				}
				waitDeadLetter(t, b, "was cancelled")
			default:
				t.Fatalf("applied %d, late %d: want exactly one", applied, late)
			}
			for _, other := range c.Batch.Calls {
				if other.ToolCallID != "update_file_readme" && (other.Reply == nil || !other.Reply.Cancelled) {
					t.Errorf("call %s: %+v, want cancelled", other.ToolCallID, other.Reply)
				}
			}
		})
	}
}

// A run under way when its conversation is cancelled is stopped by the
// cancel notice (its context ends), and what it would have stored is
// dropped: the conversation stays cancelled.
func TestCancelStopsRunUnderWay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	entered := make(chan struct{}, 1)
	model := agent.FunctionModel("blocks", func(ctx context.Context, _ agent.ModelRequest) (agent.ModelResponse, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return agent.ModelResponse{}, ctx.Err()
	})
	o, _ := e.orch(orchestrator.Config{Model: model})
	info, err := o.StartRun(ctxT(t), "hi", "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-ctxT(t).Done():
		t.Fatal("the run never reached the model")
	}
	if _, err := o.Cancel(ctxT(t), info.ConversationID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run to learn it lost its lease", func() (bool, string) {
		n := o.Stats().LeaseLost.Load()
		return n == 1, fmt.Sprint(n)
	})
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCancelled)
	if len(c.Runs) != 1 || c.Runs[0].Status != conversation.StatusCancelled {
		t.Errorf("runs %+v, want the one run cancelled", c.Runs)
	}
}

// A worker running a call of a cancelled conversation is told by the cancel
// notice: the executor's context ends, and the call is acked without a
// reply, so nothing is late and nothing is redelivered.
func TestCancelStopsWorkerCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, "")})
	entered := make(chan struct{}, 1)
	stopped := make(chan error, 1)
	exec := worker.ExecutorFunc(func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
		entered <- struct{}{}
		<-ctx.Done()
		stopped <- context.Cause(ctx)
		return wire.CallReply{}, ctx.Err()
	})
	spec := worker.ToolSpec{Name: "calculate_answer", Parameters: json.RawMessage(`{"type":"object"}`)}
	w, err := worker.New(worker.Config{Bus: e.connect("worker"), Tools: []worker.Tool{{Spec: spec, Executor: exec, Kind: "test"}}, ID: "w1", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	e.run("worker", w.Run)
	info, err := o.StartRun(ctxT(t), "what is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-ctxT(t).Done():
		t.Fatal("the call never reached the worker")
	}
	if _, err := o.Cancel(ctxT(t), info.ConversationID); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-stopped:
		if cause == nil || errors.Is(cause, context.DeadlineExceeded) {
			t.Errorf("executor stopped by %v, want the cancel", cause)
		}
	case <-ctxT(t).Done():
		t.Fatal("the executor was not stopped")
	}
	info2, err := e.connect("check").JetStream().Consumer(ctxT(t), wire.StreamCalls, "call_calculate_answer")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the call to be acked", func() (bool, string) {
		ci, err := info2.Info(ctxT(t))
		if err != nil {
			return false, err.Error()
		}
		return ci.NumAckPending == 0 && ci.NumPending == 0, fmt.Sprintf("ack pending %d, pending %d", ci.NumAckPending, ci.NumPending)
	})
	if n := o.Stats().Late.Load(); n != 0 {
		t.Errorf("%d late replies, want none (the call stopped without one)", n)
	}
}

// A cancel whose write got no answer fails its request at the store's
// timeout, as a request must not wait out an outage; but the write was
// stored, and once the log says so the cancel is told as if the answer had
// come: the conversation_cancelled event, once, and a retry refused as a
// cancel of a finished conversation. Before, the event never came.
func TestCancelStoredThoughItsRequestFailed(t *testing.T) {
	t.Parallel()
	e := newEnvListening(t)
	proxy, ob := cutBus(t, e)
	o, _ := e.orch(orchestrator.WithAppendTimeout(orchestrator.Config{Bus: ob, EventBus: e.connect("events")}, time.Second))
	c := startPaused(t, o)
	reader := e.connect("reader")
	before := logLength(t, reader, c.ID)
	waitFor(t, "the pause's events published", func() (bool, string) {
		n := o.EventsPending()
		return n == 0, fmt.Sprintf("%d pending", n)
	})
	eventSubject := wire.PrefixEvent + "." + c.ID
	eventMsgs := bustest.SubjectMsgs(t, reader, wire.StreamEvents, eventSubject)

	fired := proxy.Arm("HPUB "+bus.ConversationSubject(c.ID), true)
	_, err := o.Cancel(ctxT(t), c.ID)
	var unknown *bus.LogOutcomeError
	if !errors.As(err, &unknown) {
		t.Fatalf("cancel with its answer lost: %v, want the outcome unknown", err)
	}
	bustest.Recv(t, fired, "the cancel's record to leave")
	if n := logLength(t, reader, c.ID); n != before+1 {
		t.Fatalf("the log holds %d records, want the cancel's after %d", n, before)
	}
	proxy.Cut()

	evs := collectEvents(t, reader, c.ID, hasEvent(orchestrator.EventConversationCancelled, ""))
	ev, _ := event(evs, orchestrator.EventConversationCancelled, "")
	if ev.RunID != c.Batch.RunID || len(eventData(t, ev)["tool_call_ids"].([]any)) != len(c.Batch.Calls) {
		t.Errorf("event %+v, want the paused run and its %d calls", ev, len(c.Batch.Calls))
	}
	var ce *conversation.ConflictError
	if _, err := o.Cancel(ctxT(t), c.ID); !errors.As(err, &ce) || ce.Status != conversation.StatusCancelled {
		t.Fatalf("the retry: %v, want refused as already cancelled", err)
	}
	waitFor(t, "the events published", func() (bool, string) {
		n := o.EventsPending()
		return n == 0, fmt.Sprintf("%d pending", n)
	})
	// The cancel's event message, and no other: neither told twice nor by
	// the retry.
	if n := bustest.SubjectMsgs(t, reader, wire.StreamEvents, eventSubject); n != eventMsgs+1 {
		t.Errorf("%d event messages after the pause's %d, want the cancel's alone", n, eventMsgs)
	}
	if n := logLength(t, reader, c.ID); n != before+1 {
		t.Errorf("the log holds %d records, want the one cancel after %d", n, before)
	}
}
