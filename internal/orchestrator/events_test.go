package orchestrator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/schemas"
	"github.com/toolgate/toolgate/wire"
)

// publishResult publishes a worker's "ok" result for a call.
func publishResult(t *testing.T, b *bus.Bus, runID, callID, msgID string) {
	t.Helper()
	publishRaw(t, b, callSubject(t, runID), msgID, wire.CallReply{
		RunID: runID, ToolCallID: callID, Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"ok"`), WorkerID: "w",
	})
}

// collectEvents reads the conversation's events from the start until enough
// says it has what it waits for. Each event must validate against
// schemas/event.schema.json, whose $defs give each type's data: what the
// orchestrator emits in every test that watches events is what the
// protocol documents.
func collectEvents(t *testing.T, b *bus.Bus, convID string, enough func([]wire.Event) bool) []wire.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var evs []wire.Event
	for se, err := range b.Events(ctx, convID, 0) {
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			continue
		}
		checkEventSchema(t, se.Event)
		evs = append(evs, se.Event)
		if enough(evs) {
			return evs
		}
	}
	t.Fatalf("events of %s: timed out; got %s", convID, eventTypes(evs))
	return nil
}

func checkEventSchema(t *testing.T, ev wire.Event) {
	t.Helper()
	doc, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := schemas.Validate("event", doc); err != nil {
		t.Errorf("emitted event does not fit schemas/event.schema.json: %v\n%s", err, doc)
	}
}

func eventTypes(evs []wire.Event) string {
	var s []string
	for _, ev := range evs {
		s = append(s, ev.Type+":"+ev.ToolCallID)
	}
	return strings.Join(s, ", ")
}

// event finds the last event of type typ about call (any call when "").
func event(evs []wire.Event, typ, call string) (wire.Event, bool) {
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == typ && (call == "" || evs[i].ToolCallID == call) {
			return evs[i], true
		}
	}
	return wire.Event{}, false
}

func hasEvent(typ, call string) func([]wire.Event) bool {
	return func(evs []wire.Event) bool { _, ok := event(evs, typ, call); return ok }
}

func eventData(t *testing.T, ev wire.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(ev.Data, &m); err != nil {
		t.Fatalf("%s event data %s: %v", ev.Type, ev.Data, err)
	}
	return m
}

// The event stream tells who decided each approval and how each result
// came out, and each run's start carries its prompt: what an inbox shows.
func TestEventsTellWhoDecided(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker()
	e.approverBot("bot", seedPolicy, nil)
	o, _ := e.orch(orchestrator.Config{InstanceID: "one"})
	info, err := o.StartRun(ctxT(t), seedPrompt, "")
	if err != nil {
		t.Fatal(err)
	}
	evs := collectEvents(t, e.connect("events"), info.ConversationID, hasEvent(orchestrator.EventRunCompleted, ""))

	got := map[string]map[string]any{}
	for _, ev := range evs {
		switch ev.Type {
		case orchestrator.EventReplyApplied:
			d := eventData(t, ev)
			got[ev.ToolCallID+"@"+ev.RunID+"/"+d["kind"].(string)] = d
		case orchestrator.EventRunStarted:
			got["start@"+ev.RunID] = eventData(t, ev)
		}
	}
	c, err := o.Conversation(ctxT(t), info.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Runs) != 2 {
		t.Fatalf("runs = %+v, want 2", c.Runs)
	}
	// The approved .env update went to the worker as a call of the paused
	// run, its decision and its result each told by a reply_applied.
	r1, r2 := c.Runs[0].RunID, c.Runs[1].RunID
	want := map[string]map[string]any{
		"start@" + r1:                            {"resume": false, "prompt": seedPrompt, "agent": "default", "replica": "one"},
		"start@" + r2:                            {"resume": true, "agent": "default", "replica": "one"},
		"delete_file@" + r1 + "/approval":        {"kind": "approval", "approved": false, "approver_id": "bot", "message": "Deleting files is not allowed"},
		"update_file_dotenv@" + r1 + "/approval": {"kind": "approval", "approved": true, "approver_id": "bot"},
		"update_file_readme@" + r1 + "/call":     {"kind": "call", "outcome": "return", "worker_id": "worker-1"},
		"update_file_dotenv@" + r1 + "/call":     {"kind": "call", "outcome": "return", "worker_id": "worker-1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("event data (-want +got):\n%s", diff)
	}
	// The conversation itself keeps who decided, after its batches are gone.
	var decided []string
	for _, d := range c.Decisions {
		decided = append(decided, fmt.Sprintf("%s %s approved=%v by %s %q", d.RunID, d.ToolCallID, d.Approved, d.ApproverID, d.Message))
	}
	wantDecided := []string{
		fmt.Sprintf("%s delete_file approved=false by bot %q", r1, "Deleting files is not allowed"),
		fmt.Sprintf("%s update_file_dotenv approved=true by bot %q", r1, ""),
	}
	slices.Sort(decided)
	if diff := cmp.Diff(wantDecided, decided); diff != "" {
		t.Errorf("conversation decisions (-want +got):\n%s", diff)
	}
	var pauses []wire.Event
	for _, ev := range evs {
		if ev.Type == orchestrator.EventRunPaused {
			pauses = append(pauses, ev)
		}
	}
	var pending []wire.PendingCall
	if len(pauses) != 1 {
		t.Fatalf("%d run_paused events, want 1: %s", len(pauses), eventTypes(evs))
	}
	if err := json.Unmarshal(pauses[0].Data, &pending); err != nil || len(pending) != 3 || pending[1].ToolCallID != "update_file_dotenv" || pending[1].Kind != "approval" {
		t.Errorf("run_paused data = %s (%v), want the first batch", pauses[0].Data, err)
	}
}

// Refused and late replies and expiries are on the event stream with their
// reasons, and counted in the metrics as dead letters and expiries (D36,
// D37).
func TestRefusalAndExpiryEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := demoAgent(t, "    approval: args.path == \".env\"\n", "    approval: args.path == \".env\"\n    call_deadline: 300ms\n")
	reg := telemetry.NewRegistry()
	o, _ := e.orch(orchestrator.Config{Agent: cfg, Metrics: telemetry.NewOrchestratorMetrics(reg)})
	c := startPaused(t, o)
	b := e.connect("test")
	runID := c.Batch.RunID

	publishRaw(t, b, decisionSubject(t, runID), "forged", wire.Decision{
		RunID: runID, ToolCallID: "delete_file", ArgsDigest: strings.Repeat("0", 64), Approved: true, ApproverID: "bot", DecidedAt: time.Now().UTC(),
	})
	evs := collectEvents(t, b, c.ID, func(evs []wire.Event) bool {
		return hasEvent(orchestrator.EventReplyRefused, "delete_file")(evs) && hasEvent(orchestrator.EventCallsExpired, "")(evs)
	})
	refused, _ := event(evs, orchestrator.EventReplyRefused, "delete_file")
	if d := eventData(t, refused); d["kind"] != "approval" || d["verdict"] != "refused" || !strings.Contains(d["reason"].(string), "args digest") {
		t.Errorf("reply_refused data = %v", d)
	}
	expired, _ := event(evs, orchestrator.EventCallsExpired, "")
	if diff := cmp.Diff(map[string]any{"calls": 1.0, "tool_call_ids": []any{"update_file_readme"}}, eventData(t, expired)); diff != "" || expired.RunID != runID {
		t.Errorf("calls_expired of run %s (-want +got):\n%s", expired.RunID, diff)
	}

	publishResult(t, b, runID, "update_file_readme", "late-1")
	evs = collectEvents(t, b, c.ID, hasEvent(orchestrator.EventReplyRefused, "update_file_readme"))
	late, _ := event(evs, orchestrator.EventReplyRefused, "update_file_readme")
	if d := eventData(t, late); d["kind"] != "call" || d["verdict"] != "late" || !strings.Contains(d["reason"].(string), "expired") {
		t.Errorf("reply_refused data = %v", d)
	}
	waitMetrics(t, telemetry.Handler(reg), []series{
		{name: "toolgate_replies_total", labels: []string{"kind", "approval", "verdict", "refused"}, want: 1},
		{name: "toolgate_replies_total", labels: []string{"kind", "call", "verdict", "late"}, want: 1},
		{name: "toolgate_dead_letters_total", labels: []string{"component", "orchestrator", "reason", "refused"}, want: 1},
		{name: "toolgate_dead_letters_total", labels: []string{"component", "orchestrator", "reason", "late"}, want: 1},
		{name: "toolgate_expiries_total", labels: []string{"kind", "call"}, want: 1},
		{name: "toolgate_expiries_total", labels: []string{"kind", "approval"}, absent: true},
		{name: "toolgate_deferred_pending", labels: []string{"tool", "update_file", "kind", "call"}, absent: true},
		{name: "toolgate_deferred_pending", labels: []string{"tool", "delete_file", "kind", "approval"}, want: 1},
	})
}

// D24: an approval granted with override args reaches the worker with the
// approved args, not the model's, when the decision is applied (the args
// fit the tool's schema): the conversation takes two runs.
func TestApprovedOverrideArgsReachTheWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sandbox := e.worker()
	o, _ := e.orch(orchestrator.Config{})
	c := startPaused(t, o)
	b := e.connect("test")
	runID := c.Batch.RunID
	for callID, d := range map[string]wire.Decision{
		"delete_file":        {Approved: false, Message: "no"},
		"update_file_dotenv": {Approved: true, OverrideArgs: json.RawMessage(`{"path":".env.example","content":"API_KEY=\n"}`)},
	} {
		d.RunID, d.ToolCallID, d.ArgsDigest = runID, callID, pendingCall(t, c, callID).ArgsDigest
		d.ApproverID, d.DecidedAt = "alice", time.Now().UTC()
		publishRaw(t, b, decisionSubject(t, runID), "decision-"+callID, d)
	}
	c = waitStatus(t, o, c.ID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || len(c.Runs) != 2 {
		t.Fatalf("status %s (%s), runs %+v", c.Status, c.Error, c.Runs)
	}
	if got, err := os.ReadFile(filepath.Join(sandbox, ".env.example")); err != nil || string(got) != "API_KEY=\n" {
		t.Errorf(".env.example = %q, %v; want the approved content", got, err)
	}
	if _, err := os.Stat(filepath.Join(sandbox, ".env")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf(".env was written with the model's args: %v", err)
	}
}

// With inline_wait, approvals that expire while the run waits are denied
// inside the run, and their tool-return parts keep the reason "expired"
// (D37) as they do after a pause.
func TestInlineExpiredApprovalKeepsReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := demoAgent(t,
		"    approval: args.path == \".env\"\n", "    approval: args.path == \".env\"\n    deadline: 300ms\n",
		"    approval: always\n", "    approval: always\n    deadline: 300ms\n")
	cfg.InlineWait = orchestrator.Duration(20 * time.Second)
	o, _ := e.orch(orchestrator.Config{Agent: cfg})
	info, err := o.StartRun(ctxT(t), seedPrompt, "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || len(c.Runs) != 1 {
		t.Fatalf("status %s (%s), runs %+v; want completed in one run", c.Status, c.Error, c.Runs)
	}
	got := map[string]string{}
	for _, m := range c.History {
		for _, p := range m.Parts {
			if p.Kind == "tool-return" {
				got[p.ToolCallID] = string(p.Outcome) + " " + string(p.Metadata)
			}
		}
	}
	want := map[string]string{
		"delete_file":        `denied {"reason":"expired"}`,
		"update_file_dotenv": `denied {"reason":"expired"}`,
		"update_file_readme": "failed ",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tool returns (-want +got):\n%s", diff)
	}
}
