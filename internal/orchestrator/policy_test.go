package orchestrator_test

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

func signed(t *testing.T, d wire.Decision, key ed25519.PrivateKey) wire.Decision {
	t.Helper()
	if err := d.Sign(key); err != nil {
		t.Fatal(err)
	}
	return d
}

// Two replicas on one server, one of an agent whose conversations take
// only signed decisions (A), the other of another agent and with no trust
// keys (B): an unsigned decision for A's conversation that B reads is not
// applied by B, which hands it back to the consumer; a replica of A's
// config (A2) reads it then and refuses it; a signed one is applied.
// Before trust was the agent config's, B applied it (its own flag said
// nothing is checked) and the call was approved.
func TestUnsignedDecisionNeverAppliedByAnyReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub, priv := newKey(t)
	trust := map[string]ed25519.PublicKey{"bot": pub}
	a, _ := e.orch(orchestrator.Config{InstanceID: "A", TrustedApprovers: trust, ReconcileInterval: 1 << 40})
	c := startPaused(t, a)
	_, cb := namedAgent(t, "beta", "")
	cb.InstanceID, cb.ReconcileInterval = "B", 1<<40
	b, _ := e.orch(cb)
	// Every reply is B's to read until A2 starts.
	if err := a.StopReplies(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	test := e.connect("test")
	del := pendingCall(t, c, "delete_file")
	unsigned := wire.Decision{RunID: c.Batch.RunID, ToolCallID: "delete_file", ArgsDigest: del.ArgsDigest, Approved: true, ApproverID: "bot", DecidedAt: time.Now().UTC()}
	publishRaw(t, test, decisionSubject(t, c.Batch.RunID), "unsigned", unsigned)
	waitFor(t, "B to read the unsigned decision", func() (bool, string) {
		cur, err := b.Conversation(ctxT(t), c.ID)
		if err != nil {
			return false, err.Error()
		}
		if pc := pendingCall(t, cur, "delete_file"); pc.Reply != nil || pc.Approval != nil {
			return true, "" // applied: the assertion below fails
		}
		return b.Stats().DecisionsHandedOver.Load() > 0, describe(cur)
	})
	cur, err := b.Conversation(ctxT(t), c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if pc := pendingCall(t, cur, "delete_file"); pc.Reply != nil || pc.Approval != nil || cur.Status != conversation.StatusPaused {
		t.Fatalf("B applied an unsigned decision to a conversation that takes signed ones: %s", describe(cur))
	}
	if !cur.Signed {
		t.Errorf("the conversation does not record that it takes signed decisions only")
	}

	// A replica holding the conversation's config judges it: refused. B
	// stops reading, so that A2 reads what B handed back whichever way the
	// server spreads the redeliveries.
	a2, _ := e.orch(orchestrator.Config{InstanceID: "A2", TrustedApprovers: trust, ReconcileInterval: 1 << 40})
	if err := b.StopReplies(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	waitDeadLetter(t, test, "not signed")
	cur = waitCall(t, a2, c.ID, "delete_file", "the refusal", func(pc *conversation.PendingCall) bool { return pc.Refused == 1 })
	if pc := pendingCall(t, cur, "delete_file"); pc.Reply != nil {
		t.Fatalf("delete_file answered by %+v", pc.Reply)
	}
	// A signed one counts.
	publishRaw(t, test, decisionSubject(t, c.Batch.RunID), "signed", signed(t, unsigned, priv))
	waitCall(t, a2, c.ID, "delete_file", "the signed decision to apply", func(pc *conversation.PendingCall) bool {
		return pc.Reply != nil || pc.Approval != nil
	})
}

// A replica's own retention deletes the finished conversations of its
// agents only: not those of another agent kept longer, which a replica of
// that agent deletes in their time.
func TestRetentionIsTheAgentConfigs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	long, cl := namedAgent(t, "long", "")
	keep := orchestrator.Duration(720 * time.Hour)
	long.Retention = &keep
	cl.InstanceID, cl.Retention = "L", 30*time.Second // the file wins
	short, cs := namedAgent(t, "short", "")
	cs.InstanceID, cs.Retention = "S", 30*time.Second
	l, _ := e.orch(cl)
	s, _ := e.orch(cs)
	e.worker("calculate_answer")

	finish := func(o *orchestrator.Orchestrator, agent string) string {
		info, err := o.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: "What is the answer?", Agent: agent})
		if err != nil {
			t.Fatal(err)
		}
		if c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed); c.Status != conversation.StatusCompleted {
			t.Fatalf("%s: %s", agent, c.Error)
		}
		return info.ConversationID
	}
	longID, shortID := finish(l, long.Name), finish(s, short.Name)

	hourLater := time.Now().Add(time.Hour)
	if _, err := s.Sweep(ctxT(t), hourLater); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Sweep(ctxT(t), hourLater); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Conversation(ctxT(t), longID); err != nil {
		t.Errorf("the conversation of the agent kept 720h after an hour: %v", err)
	}
	if _, err := s.Conversation(ctxT(t), shortID); err == nil {
		t.Errorf("the conversation of the agent kept 30s is there after an hour")
	}
	if _, err := s.Sweep(ctxT(t), time.Now().Add(721*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Conversation(ctxT(t), longID); err != nil {
		t.Errorf("S deleted the conversation of an agent it does not run: %v", err)
	}
	if n, err := l.Sweep(ctxT(t), time.Now().Add(721*time.Hour)); err != nil || n != 1 {
		t.Errorf("L's sweep after 721h deleted %d (%v), want its conversation", n, err)
	}
	if _, err := l.Conversation(ctxT(t), longID); err == nil {
		t.Errorf("the conversation kept 720h after 721h: %v", err)
	}
}

// auditOfConversation reads the audit records of conversation convID.
func auditOfConversation(t *testing.T, b *bus.Bus, convID string) []orchestrator.AuditRecord {
	t.Helper()
	st, err := b.JetStream().Stream(ctxT(t), wire.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []orchestrator.AuditRecord
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		raw, err := st.GetMsg(ctxT(t), seq)
		if err != nil {
			continue
		}
		var r orchestrator.AuditRecord
		if err := wire.Decode(raw.Data, raw.Header.Get(wire.HeaderContentType), &r); err != nil {
			t.Fatalf("audit record %d: %v", seq, err)
		}
		if r.ConversationID == convID {
			out = append(out, r)
		}
	}
	return out
}

// policyEnv is one replica of the demo agent whose delete_file is edited
// by edit, trusting the keys of ann, bob and mallory, and a paused
// conversation started by caller.
type policyEnv struct {
	t     *testing.T
	e     *env
	o     *orchestrator.Orchestrator
	b     *bus.Bus
	c     *conversation.State
	keys  map[string]ed25519.PrivateKey
	base  wire.Decision
	msgID int
}

func newPolicyEnv(t *testing.T, caller string, edit func(*orchestrator.ToolConfig)) *policyEnv {
	t.Helper()
	e := newEnv(t)
	cfg := demoAgent(t)
	cfg.Roles = map[string][]string{"ops": {"ann", "bob"}}
	for i := range cfg.Tools {
		if cfg.Tools[i].Name == "delete_file" {
			edit(&cfg.Tools[i])
		}
	}
	p := &policyEnv{t: t, e: e, keys: map[string]ed25519.PrivateKey{}}
	trust := map[string]ed25519.PublicKey{}
	for _, name := range []string{"ann", "bob", "mallory"} {
		pub, priv := newKey(t)
		trust[name], p.keys[name] = pub, priv
	}
	p.o, _ = e.orch(orchestrator.Config{Agent: cfg, TrustedApprovers: trust})
	info, err := p.o.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: seedPrompt, Caller: []byte(`{"id":"` + caller + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	p.c = waitCall(t, p.o, info.ConversationID, "delete_file", "the approval request", func(pc *conversation.PendingCall) bool { return true })
	p.b = e.connect("test")
	del := pendingCall(t, p.c, "delete_file")
	p.base = wire.Decision{RunID: p.c.Batch.RunID, ToolCallID: "delete_file", ArgsDigest: del.ArgsDigest, DecidedAt: time.Now().UTC()}
	return p
}

// decide publishes a decision on delete_file signed by who.
func (p *policyEnv) decide(who string, approved bool) {
	p.t.Helper()
	d := p.base
	d.ApproverID, d.Approved = who, approved
	if !approved {
		d.Message = "no"
	}
	p.msgID++
	publishRaw(p.t, p.b, decisionSubject(p.t, d.RunID), fmt.Sprintf("d%d", p.msgID), signed(p.t, d, p.keys[who]))
}

// call waits for delete_file to be as cond says.
func (p *policyEnv) call(what string, cond func(*conversation.PendingCall) bool) *conversation.PendingCall {
	p.t.Helper()
	return pendingCall(p.t, waitCall(p.t, p.o, p.c.ID, "delete_file", what, cond), "delete_file")
}

func answered(pc *conversation.PendingCall) bool { return pc.Reply != nil || pc.Approval != nil }

// A trusted key outside a tool's approvers may not decide it: refused and
// audited; a member of a role the tool names decides it.
func TestApproversPerTool(t *testing.T) {
	t.Parallel()
	p := newPolicyEnv(t, "carol", func(tc *orchestrator.ToolConfig) { tc.Approvers.Names = []string{"ops"} })
	p.decide("mallory", true)
	pc := p.call("mallory's refusal", func(pc *conversation.PendingCall) bool { return pc.Refused == 1 })
	if answered(pc) || !strings.Contains(pc.LastRefusal, `approver "mallory" may not decide tool delete_file`) {
		t.Fatalf("mallory's approval: reply %+v, refusal %q", pc.Reply, pc.LastRefusal)
	}
	waitDeadLetter(t, p.b, "may not decide tool delete_file")
	var audited bool
	for _, r := range auditOfConversation(t, p.b, p.c.ID) {
		audited = audited || (r.ApproverID == "mallory" && r.Verdict == "refused" && strings.Contains(r.Reason, "may not decide"))
	}
	if !audited {
		t.Errorf("mallory's refused decision is not audited: %+v", auditOfConversation(t, p.b, p.c.ID))
	}
	p.decide("bob", false)
	pc = p.call("bob's denial", answered)
	if pc.Reply == nil || pc.Reply.By != "bob" || pc.Reply.Outcome != conversation.OutcomeDenied {
		t.Errorf("delete_file answered %+v, want bob's denial", pc.Reply)
	}
}

// The run's caller may not approve its own call (it may deny it), unless
// the tool says self_approval: allow.
func TestSelfApproval(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		p := newPolicyEnv(t, "ann", func(*orchestrator.ToolConfig) {})
		p.decide("ann", true)
		pc := p.call("ann's refusal", func(pc *conversation.PendingCall) bool { return pc.Refused == 1 })
		if answered(pc) || !strings.Contains(pc.LastRefusal, "may not approve its own call") {
			t.Fatalf("ann approved her own call: reply %+v, refusal %q", pc.Reply, pc.LastRefusal)
		}
		p.decide("ann", false)
		if pc := p.call("ann's denial", answered); pc.Reply.Outcome != conversation.OutcomeDenied {
			t.Errorf("delete_file answered %+v, want ann's denial", pc.Reply)
		}
	})
	t.Run("allowed", func(t *testing.T) {
		t.Parallel()
		p := newPolicyEnv(t, "ann", func(tc *orchestrator.ToolConfig) { tc.SelfApproval = orchestrator.SelfApprovalAllow })
		p.decide("ann", true)
		if pc := p.call("ann's approval", answered); pc.Refused != 0 {
			t.Errorf("ann's approval with self_approval: allow refused: %q", pc.LastRefusal)
		}
	})
}

// approvals: 2 approves a call at the second distinct approver's approval;
// a repeat of the first does not count.
func TestQuorumOfTwo(t *testing.T) {
	t.Parallel()
	p := newPolicyEnv(t, "carol", func(tc *orchestrator.ToolConfig) { tc.Approvals = 2 })
	p.decide("ann", true)
	pc := p.call("ann's approval to count", func(pc *conversation.PendingCall) bool { return len(pc.Approvals) == 1 })
	if answered(pc) {
		t.Fatalf("one approval of two approved the call: %+v", pc.Reply)
	}
	p.decide("ann", true) // another message, the same approver
	pc = p.call("ann's repeat", func(pc *conversation.PendingCall) bool { return pc.Duplicates == 1 })
	if answered(pc) || len(pc.Approvals) != 1 {
		t.Fatalf("ann's repeat counted: approvals %v, reply %+v", pc.Approvals, pc.Reply)
	}
	p.decide("bob", true)
	pc = p.call("bob's approval to approve it", answered)
	if pc.Refused != 0 || !slices.Equal(pc.Approvals, []string{"ann", "bob"}) {
		t.Errorf("approved with approvals %v, refused %d", pc.Approvals, pc.Refused)
	}
	if n := p.o.Stats().ApprovalsCounted.Load(); n != 1 {
		t.Errorf("approvals counted = %d, want 1", n)
	}
}

// An approval unanswered for its tool's escalate_after is escalated at
// that time: an approval_escalated event, its request published again
// (attempt 2) naming the escalation group, whose member then decides it
// though the tool's approvers do not name them.
func TestApprovalEscalates(t *testing.T) {
	t.Parallel()
	const after = 700 * time.Millisecond
	p := newPolicyEnv(t, "carol", func(tc *orchestrator.ToolConfig) {
		tc.Approvers.Names = []string{"ann"}
		tc.EscalateAfter, tc.EscalateTo = orchestrator.Duration(after), []string{"ops"}
	})
	del := pendingCall(t, p.c, "delete_file")
	if want := del.PublishedAt.Add(after); del.Escalation == nil || !del.Escalation.At.Equal(want) {
		t.Fatalf("escalation %+v, want at %s", del.Escalation, want)
	}
	evs := collectEvents(t, p.b, p.c.ID, func(evs []wire.Event) bool {
		return slices.ContainsFunc(evs, func(ev wire.Event) bool { return ev.Type == orchestrator.EventApprovalEscalated })
	})
	i := slices.IndexFunc(evs, func(ev wire.Event) bool { return ev.Type == orchestrator.EventApprovalEscalated })
	ev := evs[i]
	if ev.ToolCallID != "delete_file" || ev.Time.Before(del.Escalation.At) {
		t.Errorf("escalated %s at %s, before its time %s", ev.ToolCallID, ev.Time, del.Escalation.At)
	}
	if d := eventData(t, ev); fmt.Sprint(d["to"]) != "[ops]" || d["tool"] != "delete_file" {
		t.Errorf("event data %v", d)
	}
	st, err := p.b.JetStream().Stream(ctxT(t), wire.StreamApprovals)
	if err != nil {
		t.Fatal(err)
	}
	subj, err := wire.ApprovalSubject("delete_file")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetLastMsgForSubject(ctxT(t), subj)
	if err != nil {
		t.Fatal(err)
	}
	var req wire.ApprovalRequest
	if err := wire.Decode(raw.Data, raw.Header.Get(wire.HeaderContentType), &req); err != nil {
		t.Fatal(err)
	}
	if req.Attempt != 2 || !slices.Equal(req.EscalatedTo, []string{"ops"}) || req.ToolCallID != "delete_file" ||
		!slices.Equal(req.Approvers, []string{"ann", "bob"}) {
		t.Errorf("request published again: attempt %d, escalated_to %v, approvers %v", req.Attempt, req.EscalatedTo, req.Approvers)
	}
	var first *wire.ApprovalRequest
	for seq := uint64(1); seq < raw.Sequence && first == nil; seq++ {
		m, err := st.GetMsg(ctxT(t), seq)
		if err != nil {
			continue
		}
		var r wire.ApprovalRequest
		if wire.Decode(m.Data, m.Header.Get(wire.HeaderContentType), &r) == nil && r.ToolCallID == "delete_file" && r.Attempt == 1 {
			first = &r
		}
	}
	if first == nil || !slices.Equal(first.Approvers, []string{"ann"}) {
		t.Errorf("first request %+v, want one naming ann as its approver", first)
	}
	if pc := p.call("the escalation mark", func(pc *conversation.PendingCall) bool { return pc.Escalation != nil && pc.Escalation.Done }); answered(pc) {
		t.Fatalf("answered %+v", pc.Reply)
	}
	// bob is in ops, the escalation group, not among the tool's approvers.
	p.decide("bob", true)
	if pc := p.call("bob's approval", answered); pc.Refused != 0 {
		t.Errorf("bob's approval after the escalation refused: %q", pc.LastRefusal)
	}
}

// Over HTTP the tool's approvers and separation of duties hold as on the
// bus (the approver is the user the API names), and a replica that does
// not hold the conversation's agent config does not take an answer.
func TestAnswerOverHTTPUnderThePolicy(t *testing.T) {
	t.Parallel()
	p := newPolicyEnv(t, "ann", func(tc *orchestrator.ToolConfig) { tc.Approvers.Names = []string{"ops"} })
	answer := func(o *orchestrator.Orchestrator, by string, approved bool) error {
		return o.Answer(ctxT(t), orchestrator.Answer{ConversationID: p.c.ID, ToolCallID: "delete_file", By: by, Identified: true,
			Decision: &orchestrator.AnswerDecision{Approved: approved, ArgsDigest: p.base.ArgsDigest}})
	}
	var ae *orchestrator.AnswerError
	for _, tc := range []struct{ by, why string }{{"mallory", "may not decide tool delete_file"}, {"ann", "may not approve its own call"}} {
		if err := answer(p.o, tc.by, true); !errors.As(err, &ae) || ae.Code != orchestrator.AnswerForbidden || !strings.Contains(ae.Reason, tc.why) {
			t.Errorf("%s's approval over HTTP: %v, want forbidden: %s", tc.by, err, tc.why)
		}
	}
	_, cb := namedAgent(t, "beta", "")
	other, _ := p.e.orch(cb)
	if err := answer(other, "bob", true); !errors.As(err, &ae) || ae.Code != orchestrator.AnswerElsewhere {
		t.Errorf("an answer to a replica of another agent: %v, want elsewhere", err)
	}
	if err := answer(p.o, "bob", true); err != nil {
		t.Fatalf("bob's approval over HTTP: %v", err)
	}
}
