package orchestrator_test

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// publishRaw publishes a reply under its own message id, so that the
// stream's duplicate window does not drop what the test means to deliver
// twice.
func publishRaw(t *testing.T, b *bus.Bus, subject, msgID string, v any) {
	t.Helper()
	if _, err := b.Publish(ctxT(t), subject, msgID, v); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
}

func callSubject(t *testing.T, runID string) string {
	s, err := wire.CallReplySubject(runID)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func decisionSubject(t *testing.T, runID string) string {
	s, err := wire.DecisionSubject(runID)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A result delivered twice is applied once; the other is counted as a
// duplicate and acked (D35). Which one is applied depends on when their
// handlers reach the conversation's group: the first stored when they meet
// in one, else whichever is recorded first (a handler for the second may
// commit alone before the first's joins, on a loaded machine).
func TestDuplicateReplyAppliedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{})
	c := startPaused(t, o)
	b := e.connect("test")
	runID := c.Batch.RunID
	for i, v := range []string{`"first"`, `"second"`} {
		publishRaw(t, b, callSubject(t, runID), "dup-"+string(rune('a'+i)), wire.CallReply{
			RunID: runID, ToolCallID: "update_file_readme", Outcome: wire.OutcomeReturn, Value: json.RawMessage(v), WorkerID: "w",
		})
	}
	c = waitCall(t, o, c.ID, "update_file_readme", "the duplicate to be counted", func(pc *conversation.PendingCall) bool {
		return pc.Duplicates == 1
	})
	pc := pendingCall(t, c, "update_file_readme")
	if pc.Reply == nil || (string(pc.Reply.Value) != `"first"` && string(pc.Reply.Value) != `"second"`) {
		t.Errorf("reply = %+v, want one of the two sent", pc.Reply)
	}
	// The counter moves once the handler has its verdict, just after the
	// write that recorded both.
	waitFor(t, "the applied reply to be counted", func() (bool, string) {
		n := o.Stats().RepliesApplied.Load()
		return n > 0, fmt.Sprint(n)
	})
	if n := o.Stats().RepliesApplied.Load(); n != 1 {
		t.Errorf("applied %d replies, want 1", n)
	}
	if c.Status != conversation.StatusPaused {
		t.Errorf("status = %s, want paused (approvals pending)", c.Status)
	}
}

// A decision for an external call and a result for an approval call are
// refused, recorded on the call and dead-lettered (D20, D36).
func TestWrongKindRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{})
	c := startPaused(t, o)
	b := e.connect("test")
	runID := c.Batch.RunID
	readme := pendingCall(t, c, "update_file_readme")
	digest, err := deferred.ArgsDigest(readme.Args)
	if err != nil {
		t.Fatal(err)
	}
	publishRaw(t, b, decisionSubject(t, runID), "wk-1", wire.Decision{
		RunID: runID, ToolCallID: "update_file_readme", ArgsDigest: digest, Approved: true, ApproverID: "bot", DecidedAt: time.Now(),
	})
	publishRaw(t, b, callSubject(t, runID), "wk-2", wire.CallReply{
		RunID: runID, ToolCallID: "delete_file", Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"deleted"`), WorkerID: "w",
	})
	waitDeadLetter(t, b, "a decision for external call update_file_readme")
	waitDeadLetter(t, b, "a result for approval call delete_file")
	c, err = o.Conversation(ctxT(t), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"update_file_readme", "delete_file"} {
		pc := pendingCall(t, c, id)
		if pc.Reply != nil || pc.Refused != 1 || !strings.Contains(pc.LastRefusal, "wrong kind") {
			t.Errorf("%s: reply %+v, refused %d (%q); want unsettled, one refusal", id, pc.Reply, pc.Refused, pc.LastRefusal)
		}
	}
}

// Decisions that do not answer an issued call with its digest, or that do
// not come from a trusted key, are refused; a valid signed one is applied
// (D36).
func TestForgedDecisionsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub, priv := newKey(t)
	_, otherPriv := newKey(t)
	o, _ := e.orch(orchestrator.Config{TrustedApprovers: map[string]ed25519.PublicKey{"bot": pub}})
	c := startPaused(t, o)
	b := e.connect("test")
	runID := c.Batch.RunID
	del := pendingCall(t, c, "delete_file")

	sign := func(d wire.Decision, key ed25519.PrivateKey) wire.Decision {
		t.Helper()
		if key != nil {
			if err := d.Sign(key); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	good := wire.Decision{RunID: runID, ToolCallID: "delete_file", ArgsDigest: del.ArgsDigest, Approved: true, ApproverID: "bot", DecidedAt: time.Now().UTC()}
	wrongDigest := good
	wrongDigest.ArgsDigest = strings.Repeat("0", 64)
	unknown := good
	unknown.ToolCallID = "never_issued"
	stranger := good
	stranger.ApproverID = "mallory"

	cases := []struct {
		name   string
		d      wire.Decision
		reason string
	}{
		{"wrong digest", sign(wrongDigest, priv), "args digest"},
		{"unknown call", sign(unknown, priv), "issued no call never_issued"},
		{"untrusted approver", sign(stranger, otherPriv), `approver "mallory" is not trusted`},
		{"wrong key", sign(good, otherPriv), "signature"},
		{"unsigned", good, "not signed"},
	}
	for i, tc := range cases {
		publishRaw(t, b, decisionSubject(t, runID), "forged-"+string(rune('a'+i)), tc.d)
		waitDeadLetter(t, b, tc.reason)
	}
	c, err := o.Conversation(ctxT(t), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if pc := pendingCall(t, c, "delete_file"); pc.Reply != nil || pc.Refused != 4 {
		t.Errorf("delete_file: reply %+v, refused %d; want unsettled, 4 refusals", pc.Reply, pc.Refused)
	}
	if c.Batch.UnknownReplies != 1 {
		t.Errorf("unknown replies = %d, want 1", c.Batch.UnknownReplies)
	}

	publishRaw(t, b, decisionSubject(t, runID), "genuine", sign(good, priv))
	waitCall(t, o, c.ID, "delete_file", "the signed decision to apply", func(pc *conversation.PendingCall) bool {
		d := pc.Decision()
		return d != nil && d.Outcome == conversation.OutcomeApproved && d.By == "bot"
	})
}

// A pending call past its deadline is settled by the orchestrator: an
// external call as failed "timed out"; a result that comes later is refused
// as late and recorded (D37).
func TestLateReplyRefusedAfterExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := demoAgent(t, "    approval: args.path == \".env\"\n", "    approval: args.path == \".env\"\n    call_deadline: 300ms\n")
	o, _ := e.orch(orchestrator.Config{Agent: cfg})
	c := startPaused(t, o)
	c = waitCall(t, o, c.ID, "update_file_readme", "the call to expire", func(pc *conversation.PendingCall) bool {
		return pc.Reply != nil
	})
	pc := pendingCall(t, c, "update_file_readme")
	if !pc.Reply.Expired || pc.Reply.Outcome != conversation.OutcomeFailed || pc.Reply.Message != "timed out" {
		t.Fatalf("expired reply = %+v", pc.Reply)
	}
	b := e.connect("test")
	publishRaw(t, b, callSubject(t, c.Batch.RunID), "late-1", wire.CallReply{
		RunID: c.Batch.RunID, ToolCallID: "update_file_readme", Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"ok"`), WorkerID: "w",
	})
	waitDeadLetter(t, b, "late")
	c = waitCall(t, o, c.ID, "update_file_readme", "the late reply to be recorded", func(pc *conversation.PendingCall) bool {
		return pc.Late == 1
	})
	if pc := pendingCall(t, c, "update_file_readme"); !pc.Reply.Expired {
		t.Errorf("the late reply replaced the expiry: %+v", pc.Reply)
	}
}

// Expired approvals are denied "approval expired" with reason "expired";
// once everything expired the conversation completes through its
// follow-up, with the expiries in its history (D37).
func TestExpiryCompletesConversation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := demoAgent(t,
		"    approval: args.path == \".env\"\n", "    approval: args.path == \".env\"\n    deadline: 300ms\n",
		"    approval: always\n", "    approval: always\n    deadline: 300ms\n")
	o, _ := e.orch(orchestrator.Config{Agent: cfg})
	info, err := o.StartRun(ctxT(t), seedPrompt, "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted {
		t.Fatalf("status %s: %s", c.Status, c.Error)
	}
	got := map[string]string{}
	for _, m := range c.History {
		for _, p := range m.Parts {
			if p.Kind == "tool-return" {
				got[p.ToolCallID] = string(p.Outcome) + " " + string(p.Value) + " " + string(p.Metadata)
			}
		}
	}
	for id, want := range map[string][]string{
		"delete_file":        {"denied", "approval expired", `{"reason":"expired"}`},
		"update_file_dotenv": {"denied", "approval expired", `{"reason":"expired"}`},
		"update_file_readme": {"failed", "timed out"},
	} {
		for _, w := range want {
			if !strings.Contains(got[id], w) {
				t.Errorf("%s: %q lacks %q", id, got[id], w)
			}
		}
	}
	if n := o.Stats().Expired.Load(); n != 3 {
		t.Errorf("expired %d calls, want 3", n)
	}
}

// A result that comes after its call expired and after the follow-up took
// the batch (the conversation has completed) is refused as late and
// recorded, as D37 says of every late answer: a dead letter, a
// reply_refused event with verdict late, an audit record. Before, a reply
// to a run whose batch was over was counted as a repeat and acked with no
// trace of it.
func TestLateReplyRecordedAfterTheBatchEnded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, "    deadline: 300ms\n")})
	info, err := o.StartRun(ctxT(t), "what is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted {
		t.Fatalf("%s", describe(c))
	}
	const callID = "pyd_ai_tool_call_id"
	runID := ""
	for _, m := range c.History {
		for _, p := range m.Parts {
			if p.Kind == "tool-call" && p.ToolCallID == callID {
				runID = m.RunID
			}
		}
	}
	if runID == "" || c.Batch != nil && c.Batch.RunID == runID {
		t.Fatalf("the paused run %q, batch %+v: want a run whose batch is over", runID, c.Batch)
	}
	b := e.connect("test")
	publishRaw(t, b, callSubject(t, runID), "late-after-the-end", wire.CallReply{
		RunID: runID, ToolCallID: callID, Outcome: wire.OutcomeReturn, Value: json.RawMessage(`42`), WorkerID: "w",
	})
	waitDeadLetter(t, b, "expired before this reply came")
	evs := collectEvents(t, b, c.ID, hasEvent(orchestrator.EventReplyRefused, callID))
	ev, _ := event(evs, orchestrator.EventReplyRefused, callID)
	if v := eventData(t, ev)["verdict"]; v != "late" {
		t.Errorf("reply_refused verdict %v, want late", v)
	}
	auditSubj, err := wire.AuditSubject(runID)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the late reply's audit record", func() (bool, string) {
		n := bustest.SubjectMsgs(t, b, wire.StreamAudit, auditSubj)
		return n > 0, fmt.Sprint(n)
	})
	if n := o.Stats().Late.Load(); n != 1 {
		t.Errorf("%d late replies counted, want 1", n)
	}
}
