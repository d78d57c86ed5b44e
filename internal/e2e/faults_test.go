package e2e_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// slowAgent has one tool, run by the exec workers.
const slowAgent = `model:
  provider: script
  script: script.json
tools:
  - name: slow
    description: Runs on an exec tool-worker.
    parameters: {type: object, properties: {n: {type: integer}}}
`

// respond is a script response calling slow once per id.
func respond(ids ...string) map[string]any {
	var calls []map[string]any
	for i, id := range ids {
		calls = append(calls, map[string]any{"tool": "slow", "id": id, "args": map[string]any{"n": i}})
	}
	return map[string]any{"calls": calls}
}

var answer = map[string]any{"text": "done"}

func scriptOf(rs ...map[string]any) []map[string]any { return rs }

// startHeldByA starts a system running the slow agent's one call, c1, on
// worker a, which holds it, and waits until a has started it.
func startHeldByA(t *testing.T) (s *system, b *bus.Bus, api *client.Client, a *proc, runs []client.RunStatus) {
	t.Helper()
	s = newSystem(t, slowAgent, scriptOf(respond("c1"), answer), true)
	b = s.connect()
	_, api = s.orchestrator("orchestrator")
	s.hold("a", true)
	a = s.worker("a", "slow")
	runs = startRuns(t, 1, api)
	waitFor(t, "worker a to start the call", func() (bool, string) {
		return s.starts(runs[0].RunID, "c1", "a") == 1, ""
	})
	return s, b, api, a, runs
}

// waitReplies waits until the replies stream holds at least n messages.
func waitReplies(t *testing.T, b *bus.Bus, what string, n int) {
	t.Helper()
	waitFor(t, what, func() (bool, string) {
		m := bustest.StreamMsgs(t, b, wire.StreamReplies)
		return m >= uint64(n), fmt.Sprint(m)
	})
}

func checkNoDeadLetters(t *testing.T, b *bus.Bus) {
	t.Helper()
	if dl := bustest.DeadLetters(t, b); len(dl) != 0 {
		t.Errorf("dead letters: %+v", dl)
	}
}

// A worker killed with SIGKILL while it runs a call: the call is delivered
// again to another worker after the ack wait, the conversation completes,
// and the result is applied once (D35).
func TestWorkerKilledMidCallRedelivered(t *testing.T) {
	t.Parallel()
	s, b, api, a, runs := startHeldByA(t)
	run := runs[0]
	a.kill()
	s.worker("b", "slow")

	conv := waitConversations(t, api, runs)[run.ConversationID]
	got := checkCompleted(t, conv, 2, "c1")
	if w := got["c1"]; w.Worker != "b" || w.Key != run.RunID+":c1" {
		t.Errorf("applied result %+v, want worker b's with key %s:c1", w, run.RunID)
	}
	if na, nb := s.starts(run.RunID, "c1", "a"), s.starts(run.RunID, "c1", "b"); na != 1 || nb != 1 {
		t.Errorf("runs of the call: a %d, b %d; want 1 each", na, nb)
	}
	subj, _ := wire.CallReplySubject(run.RunID)
	if n := bustest.SubjectMsgs(t, b, wire.StreamReplies, subj); n != 1 {
		t.Errorf("%d results stored for the run, want 1", n)
	}
	if n := checkAppliedOnce(t, b, run.ConversationID); n != 1 {
		t.Errorf("%d replies applied, want 1", n)
	}
	checkNoDeadLetters(t, b)
}

// Two workers both answer one call: worker a freezes (SIGSTOP) mid-call, so
// its in-progress acks stop and the call goes to worker b, whose result is
// applied; then a thaws, finishes and publishes its own result. The second
// result carries the same message id and is dropped as a duplicate by the
// stream: the conversation keeps b's result, once, and no follow-up is added
// (D35).
func TestFrozenWorkerAndItsReplacementBothReply(t *testing.T) {
	t.Parallel()
	s, b, api, a, runs := startHeldByA(t)
	run := runs[0]
	a.signal(syscall.SIGSTOP)
	s.worker("b", "slow")
	conv := waitConversations(t, api, runs)[run.ConversationID]
	if got := checkCompleted(t, conv, 2, "c1"); got["c1"].Worker != "b" {
		t.Fatalf("applied result %+v, want worker b's", got["c1"])
	}

	// Thaw a and let it finish: a drained worker has published its result
	// and acked before it exits.
	s.hold("a", false)
	a.signal(syscall.SIGCONT)
	waitFor(t, "worker a to finish the call", func() (bool, string) {
		for _, l := range strings.Split(tail(a.log, 200), "\n") {
			if strings.Contains(l, `msg="call executed"`) && strings.Contains(l, "tool_call_id=c1") {
				return true, ""
			}
		}
		return false, ""
	})
	a.signal(syscall.SIGTERM)
	a.wait()
	if a.err != nil {
		t.Errorf("worker a exited with %v", a.err)
	}

	subj, _ := wire.CallReplySubject(run.RunID)
	if n := bustest.SubjectMsgs(t, b, wire.StreamReplies, subj); n != 1 {
		t.Errorf("%d results stored for the run, want 1 (the second dropped by its id)", n)
	}
	conv, err := api.Conversation(ctxT(t), run.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	if got := checkCompleted(t, conv, 2, "c1"); got["c1"].Worker != "b" {
		t.Errorf("after a's reply: applied result %+v, want worker b's", got["c1"])
	}
	if n := checkAppliedOnce(t, b, run.ConversationID); n != 1 {
		t.Errorf("%d replies applied, want 1", n)
	}
	checkNoDeadLetters(t, b)
}

// The orchestrator is killed (SIGKILL) while every conversation waits for
// its first batch; the results arrive while no orchestrator runs; the next
// orchestrator applies them and starts the follow-ups, whose batches go out;
// it is killed in turn while their results arrive; the third finishes. Every
// conversation completes with one follow-up per batch and one result per
// call (D35).
func TestOrchestratorKilledMidBatchAndWhileRepliesArrive(t *testing.T) {
	t.Parallel()
	const n = 6
	s := newSystem(t, slowAgent, scriptOf(respond("c1", "c2"), respond("c3"), answer), true)
	b := s.connect()
	s.hold("", true)
	s.worker("w", "slow")
	o1, api := s.orchestrator("orchestrator-1")
	runs := startRuns(t, n, api)
	waitFor(t, "every first-batch call to start", func() (bool, string) {
		c1, c2 := s.startedCount("c1"), s.startedCount("c2")
		return c1 == n && c2 == n, fmt.Sprintf("c1 %d, c2 %d", c1, c2)
	})
	o1.kill()

	s.hold("c3", true)
	s.hold("", false)
	waitReplies(t, b, "the first batches' results to be stored", 2*n)
	o2, _ := s.orchestrator("orchestrator-2")
	waitFor(t, "every follow-up's call to start", func() (bool, string) {
		c := s.startedCount("c3")
		return c == n, fmt.Sprint(c)
	})
	s.hold("c3", false)
	waitReplies(t, b, "a second-batch result to arrive", 2*n+1)
	o2.kill()

	_, api = s.orchestrator("orchestrator-3")
	convs := waitConversations(t, api, runs)
	if got := s.startedCount("c3"); got != n {
		t.Errorf("c3 started under %d run ids, want %d", got, n)
	}
	for _, r := range runs {
		conv := convs[r.ConversationID]
		got := checkCompleted(t, conv, 3, "c1", "c2", "c3")
		if len(conv.Runs) != 3 {
			continue
		}
		for id, run := range map[string]string{"c1": conv.Runs[0].RunID, "c2": conv.Runs[0].RunID, "c3": conv.Runs[1].RunID} {
			if w := got[id]; w.Worker != "w" || w.Key != run+":"+id {
				t.Errorf("%s: %s result %+v, want worker w's with key %s:%s", r.ConversationID, id, w, run, id)
			}
		}
		checkAppliedOnce(t, b, r.ConversationID)
	}
	checkNoDeadLetters(t, b)
}

// Two orchestrator replicas share the conversations, the replies and the
// follow-ups; one is killed while the second batches' results arrive and a
// new one joins. Every batch still gets exactly one follow-up (D35).
func TestOrchestratorReplicasOneKilled(t *testing.T) {
	t.Parallel()
	const n = 10
	s := newSystem(t, slowAgent, scriptOf(respond("c1"), respond("c2"), respond("c3"), answer), true)
	b := s.connect()
	s.hold("c2", true)
	s.worker("w", "slow")
	o1, api1 := s.orchestrator("orchestrator-1")
	_, api2 := s.orchestrator("orchestrator-2")
	runs := startRuns(t, n, api1, api2)
	waitFor(t, "every second call to start", func() (bool, string) {
		c := s.startedCount("c2")
		return c == n, fmt.Sprint(c)
	})
	s.hold("c2", false)
	waitReplies(t, b, "a second-batch result to arrive", n+1)
	o1.kill()
	s.orchestrator("orchestrator-3")

	convs := waitConversations(t, api2, runs)
	for _, r := range runs {
		conv := convs[r.ConversationID]
		got := checkCompleted(t, conv, 4, "c1", "c2", "c3")
		for id, w := range got {
			if w.Worker != "w" {
				t.Errorf("%s: %s result %+v", r.ConversationID, id, w)
			}
		}
		checkAppliedOnce(t, b, r.ConversationID)
	}
	for _, id := range []string{"c1", "c2", "c3"} {
		if got := s.startedCount(id); got != n {
			t.Errorf("%s started under %d run ids, want %d", id, got, n)
		}
	}
	checkNoDeadLetters(t, b)
}

// deadlineAgent: an approval and an external call that expire after 3s, and
// a call that does not expire.
const deadlineAgent = `model:
  provider: script
  script: script.json
tools:
  - name: ask
    approval: always
    deadline: 3s
  - name: ext
    deadline: 3s
  - name: slow
    deadline: 10m
`

// Deadlines live in KV and survive an orchestrator killed with SIGKILL (its
// embedded NATS server with it): the next orchestrator, on the same store,
// denies the approval as "approval expired" (reason expired in its metadata)
// and fails the external call as "timed out", says so in the events, and
// refuses and records the replies that come later; the conversation goes on
// once its last call is answered (D37).
func TestDeadlinesSurviveOrchestratorKill(t *testing.T) {
	t.Parallel()
	s := newSystem(t, deadlineAgent, scriptOf(map[string]any{"calls": []map[string]any{
		{"tool": "ask", "id": "a1", "args": map[string]any{"x": 1}},
		{"tool": "ext", "id": "e1", "args": map[string]any{}},
		{"tool": "slow", "id": "s1", "args": map[string]any{}},
	}}, answer), false)
	o1, api := s.orchestrator("orchestrator-1")
	b := s.connect()
	runs := startRuns(t, 1, api)
	run := runs[0]
	waitFor(t, "the batch to be published", func() (bool, string) {
		ext := bustest.SubjectMsgs(t, b, wire.StreamCalls, "toolgate.call.ext")
		slow := bustest.SubjectMsgs(t, b, wire.StreamCalls, "toolgate.call.slow")
		ask := bustest.SubjectMsgs(t, b, wire.StreamApprovals, "toolgate.approval.ask")
		return ext == 1 && slow == 1 && ask == 1, fmt.Sprintf("ext %d slow %d ask %d", ext, slow, ask)
	})
	o1.kill()
	_, api = s.orchestrator("orchestrator-2")

	waitFor(t, "a1 and e1 to expire", func() (bool, string) {
		conv, err := api.Conversation(ctxT(t), run.ConversationID)
		if err != nil {
			return false, err.Error()
		}
		return len(conv.Pending) == 1 && conv.Pending[0].ToolCallID == "s1", fmt.Sprintf("%s %+v", conv.Status, conv.Pending)
	})

	// Replies after the deadline are refused as late, dead-lettered and
	// counted on their call.
	st, err := b.JetStream().Stream(ctxT(t), wire.StreamApprovals)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetLastMsgForSubject(ctxT(t), "toolgate.approval.ask")
	if err != nil {
		t.Fatal(err)
	}
	var req wire.ApprovalRequest
	if err := wire.Decode(raw.Data, raw.Header.Get(wire.HeaderContentType), &req); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishDecision(ctxT(t), wire.Decision{
		RunID: run.RunID, ToolCallID: "a1", ArgsDigest: req.ArgsDigest, Approved: true, ApproverID: "late-bot", DecidedAt: time.Now().UTC(),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PublishCallReply(ctxT(t), wire.CallReply{
		RunID: run.RunID, ToolCallID: "e1", Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"late"`), WorkerID: "late-worker",
	}); err != nil {
		t.Fatal(err)
	}
	var dls []bus.DeadLetter
	waitFor(t, "the late replies to be dead-lettered", func() (bool, string) {
		dls = bustest.DeadLetters(t, b)
		return len(dls) >= 2, fmt.Sprint(len(dls))
	})
	for _, dl := range dls {
		if !strings.Contains(dl.Reason, "late") || !strings.Contains(dl.Reason, "expired") {
			t.Errorf("dead letter on %s: reason %q, want late/expired", dl.Subject, dl.Reason)
		}
	}
	stored := storedConversation(t, b, run.ConversationID)
	for _, pc := range stored.Batch.Calls {
		switch pc.ToolCallID {
		case "a1", "e1":
			if pc.Late != 1 || pc.Reply == nil || !pc.Reply.Expired {
				t.Errorf("%s: late %d, reply %+v; want the expiry kept and one late reply recorded", pc.ToolCallID, pc.Late, pc.Reply)
			}
		case "s1":
			if pc.Reply != nil {
				t.Errorf("s1 settled: %+v", pc.Reply)
			}
		}
	}

	if _, err := b.PublishCallReply(ctxT(t), wire.CallReply{
		RunID: run.RunID, ToolCallID: "s1", Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"ok"`), WorkerID: "test",
	}); err != nil {
		t.Fatal(err)
	}
	conv := waitConversations(t, api, runs)[run.ConversationID]
	checkCompleted(t, conv, 2, "a1", "e1", "s1")
	rets := returns(t, conv)
	check := func(id, outcome, content, meta string) {
		t.Helper()
		if len(rets[id]) != 1 {
			return
		}
		r := rets[id][0]
		if r.Outcome != outcome || !strings.Contains(string(r.Content), content) || (meta != "" && string(r.Metadata) != meta) {
			t.Errorf("%s: %s %s %s; want %s %q %s", id, r.Outcome, r.Content, r.Metadata, outcome, content, meta)
		}
	}
	check("a1", "denied", conversation.ExpiredApprovalMessage, `{"reason":"expired"}`)
	check("e1", "failed", conversation.ExpiredCallMessage, "")
	check("s1", "success", `"ok"`, "")

	expired := 0
	for _, ev := range convEvents(t, b, run.ConversationID) {
		if ev.Type == orchestrator.EventCallsExpired {
			var d struct {
				Calls int `json:"calls"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			expired += d.Calls
		}
	}
	if expired != 2 {
		t.Errorf("events report %d expired calls, want 2", expired)
	}
	if dl := bustest.DeadLetters(t, b); len(dl) != 2 {
		t.Errorf("%d dead letters, want the 2 late replies", len(dl))
	}
}
