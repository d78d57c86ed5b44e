package orchestrator_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// approversRule is a tool's approvers: {rule: expr}, compiled as the agent
// file's loader compiles it.
func approversRule(t *testing.T, expr string) orchestrator.Approvers {
	t.Helper()
	cfg, err := agentconfig.Parse([]byte("model: {provider: test}\ntools:\n  - name: x\n    approval: always\n    approvers: {rule: '"+expr+"'}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Tools[0].Approvers
}

// waitGrantAudit waits for the audit record of grant id on call callID of
// conversation convID with verdict, and returns it.
func waitGrantAudit(t *testing.T, e *env, convID, callID, id, verdict string) orchestrator.AuditRecord {
	t.Helper()
	b := e.connect("audit")
	var found orchestrator.AuditRecord
	waitFor(t, "the audit record of grant "+id+" "+verdict, func() (bool, string) {
		recs := auditOfConversation(t, b, convID)
		for _, r := range recs {
			if r.Grant == id && r.ToolCallID == callID && r.Verdict == verdict {
				found = r
				return true, ""
			}
		}
		return false, fmt.Sprint(recs)
	})
	return found
}

// A grant on the bus is checked against the trust of the agent config of
// the conversation it would decide, as a decision is, not against the
// replica's --trust-approver keys: one signed by a key only the replica
// trusts, or unsigned where the agent file trusts keys, is ignored (listed
// and audited with why) and the call is asked about. Before, the
// replica's keys decided, and with none every grant applied.
func TestGrantsAreCheckedAgainstTheAgentsTrust(t *testing.T) {
	t.Parallel()
	pub, key := newKey(t)
	annPub, _ := newKey(t)
	b64 := func(k ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(k) }
	for _, tc := range []struct {
		name     string
		trust    map[string]string            // the agent file's trust:
		replica  map[string]ed25519.PublicKey // the replica's --trust-approver
		key      ed25519.PrivateKey
		ignored  string
		decision bool
	}{
		{name: "signed by a key of the agent file", trust: map[string]string{"bot": b64(pub)}, key: key, decision: true},
		{name: "signed by a key only the replica trusts", trust: map[string]string{"ann": b64(annPub)},
			replica: map[string]ed25519.PublicKey{"bot": pub}, key: key, ignored: `approver "bot" is not trusted`},
		{name: "unsigned where the agent file trusts keys", trust: map[string]string{"bot": b64(pub)},
			ignored: "grant from bot is not signed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.worker()
			cfg := demoAgent(t)
			cfg.Trust = tc.trust
			o, _ := e.orch(orchestrator.Config{Agent: cfg, TrustedApprovers: tc.replica})
			g, gs := giveDotenvGrant(t, e, o, tc.key)
			if len(gs) != 1 || (tc.ignored == "") != (gs[0].Ignored == "") || !strings.Contains(gs[0].Ignored, tc.ignored) {
				t.Errorf("grants listed %+v, want it ignored for %q", gs, tc.ignored)
			}
			info, err := o.StartRun(ctxT(t), seedPrompt, "")
			if err != nil {
				t.Fatal(err)
			}
			c := waitStatus(t, o, info.ConversationID, conversation.StatusPaused)
			if d := pendingCall(t, c, "update_file_dotenv").Decision(); (d != nil) != tc.decision {
				t.Fatalf("update_file_dotenv decided %+v, want decided: %v", d, tc.decision)
			}
			if tc.ignored != "" {
				rec := waitGrantAudit(t, e, c.ID, "update_file_dotenv", g.ID, "refused")
				if !strings.Contains(rec.Reason, tc.ignored) {
					t.Errorf("ignored grant audited with %q, want %q", rec.Reason, tc.ignored)
				}
			}
		})
	}
}

// A grant applies only if its giver may decide the call as a decision
// would: named by the tool's approvers (directly, through a role or by
// its rule) and, unless self_approval: allow, not the run's caller
// approving its own call (a denial it may give). One that fails is
// ignored for that call, which is asked about, and audited with why.
// Before, any grant decided any call of its tool.
func TestGrantsFollowTheToolsApprovers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		by       string
		deny     bool
		edit     func(*orchestrator.ToolConfig)
		ignored  string // why, "" when it decides the call
		listed   string // why the list says it is ignored
		decision bool
	}{
		{name: "outside the approvers", by: "mallory", ignored: `approver "mallory" may not decide tool update_file`,
			listed: `approver "mallory" may not decide tool update_file`},
		{name: "in a role of the approvers", by: "bob", decision: true},
		{name: "the run's caller approving", by: "ann", ignored: "may not approve its own call"},
		{name: "the run's caller with self_approval allow", by: "ann", decision: true,
			edit: func(tc *orchestrator.ToolConfig) { tc.SelfApproval = orchestrator.SelfApprovalAllow }},
		{name: "the run's caller denying", by: "ann", deny: true, decision: true},
		{name: "refused by the approvers rule", by: "bob", ignored: "approvers rule",
			edit: func(tc *orchestrator.ToolConfig) {
				tc.Approvers = approversRule(t, `decider.roles.exists(r, r == "ops") && decider.id != "bob"`)
			}},
		{name: "admitted by the approvers rule", by: "bob", decision: true,
			edit: func(tc *orchestrator.ToolConfig) {
				tc.Approvers = approversRule(t, `decider.roles.exists(r, r == "ops") && decider.id != caller.id`)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.worker()
			cfg := demoAgent(t)
			cfg.Roles = map[string][]string{"ops": {"ann", "bob"}}
			for i := range cfg.Tools {
				if cfg.Tools[i].Name == "update_file" {
					cfg.Tools[i].Approvers.Names = []string{"ops"}
					if tc.edit != nil {
						tc.edit(&cfg.Tools[i])
					}
				}
			}
			o, _ := e.orch(orchestrator.Config{Agent: cfg})
			g, err := o.Grant(ctxT(t), orchestrator.GrantRequest{By: tc.by, Identified: true, Tool: "update_file", Approved: !tc.deny})
			if err != nil {
				t.Fatal(err)
			}
			gs, err := o.Grants(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(gs) != 1 || (tc.listed == "") != (gs[0].Ignored == "") || !strings.Contains(gs[0].Ignored, tc.listed) {
				t.Errorf("grants listed %+v, want ignored for %q", gs, tc.listed)
			}
			info, err := o.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: seedPrompt, Caller: json.RawMessage(`{"id":"ann"}`)})
			if err != nil {
				t.Fatal(err)
			}
			c := waitStatus(t, o, info.ConversationID, conversation.StatusPaused, conversation.StatusCompleted)
			var decided bool
			for _, d := range c.Decisions {
				decided = decided || (d.ToolCallID == "update_file_dotenv" && d.GrantID == g.ID && d.Approved == !tc.deny)
			}
			if decided != tc.decision {
				t.Fatalf("update_file_dotenv decided by the grant: %v, want %v (decisions %+v)", decided, tc.decision, c.Decisions)
			}
			if tc.ignored == "" {
				waitGrantAudit(t, e, c.ID, "update_file_dotenv", g.ID, "applied")
				return
			}
			if pc := pendingCall(t, c, "update_file_dotenv"); pc.Decision() != nil {
				t.Errorf("update_file_dotenv decided %+v, want asked about", pc.Decision())
			}
			rec := waitGrantAudit(t, e, c.ID, "update_file_dotenv", g.ID, "refused")
			if !strings.Contains(rec.Reason, tc.ignored) {
				t.Errorf("ignored grant audited with %q, want %q", rec.Reason, tc.ignored)
			}
		})
	}
}

// A tool's approvers rule decides who may decide its calls from the
// decider's identity and the run's context: a trusted key without the
// role is refused, the run's caller is refused by the rule though the
// tool allows self-approval, and a member of the role who is not the
// caller decides it.
func TestApproversRuleDecides(t *testing.T) {
	t.Parallel()
	p := newPolicyEnv(t, "ann", func(tc *orchestrator.ToolConfig) {
		tc.Approvers = approversRule(t, `decider.roles.exists(r, r == "ops") && decider.id != caller.id && conversation.agent != ""`)
		tc.SelfApproval = orchestrator.SelfApprovalAllow
	})
	p.decide("mallory", true)
	pc := p.call("mallory's refusal", func(pc *conversation.PendingCall) bool { return pc.Refused == 1 })
	if answered(pc) || !strings.Contains(pc.LastRefusal, `approver "mallory" may not decide tool delete_file (approvers rule:`) {
		t.Fatalf("mallory's approval: reply %+v, refusal %q", pc.Reply, pc.LastRefusal)
	}
	p.decide("ann", true)
	pc = p.call("ann's refusal", func(pc *conversation.PendingCall) bool { return pc.Refused == 2 })
	if answered(pc) || !strings.Contains(pc.LastRefusal, `approver "ann" may not decide tool delete_file (approvers rule:`) {
		t.Fatalf("ann's approval: reply %+v, refusal %q", pc.Reply, pc.LastRefusal)
	}
	p.decide("bob", true)
	pc = p.call("bob's approval", answered)
	if d := pc.Decision(); d == nil || d.By != "bob" || d.Outcome != conversation.OutcomeApproved {
		t.Errorf("delete_file decided %+v, want bob's approval", d)
	}
}

// The approval request of a tool whose approvers are a rule carries the
// rule and the config's roles, so that inboxes and bots evaluate it over
// themselves, and no approvers list.
func TestApprovalRequestCarriesTheApproversRule(t *testing.T) {
	t.Parallel()
	const expr = `decider.roles.exists(r, r == "ops") && decider.id != caller.id`
	p := newPolicyEnv(t, "ann", func(tc *orchestrator.ToolConfig) { tc.Approvers = approversRule(t, expr) })
	subj, err := wire.ApprovalSubject("delete_file")
	if err != nil {
		t.Fatal(err)
	}
	var req *wire.ApprovalRequest
	waitFor(t, "delete_file's approval request", func() (bool, string) {
		st, err := p.b.JetStream().Stream(ctxT(t), wire.StreamApprovals)
		if err != nil {
			return false, err.Error()
		}
		raw, err := st.GetLastMsgForSubject(ctxT(t), subj)
		if err != nil {
			return false, err.Error()
		}
		var r wire.ApprovalRequest
		if err := wire.Decode(raw.Data, raw.Header.Get(wire.HeaderContentType), &r); err != nil {
			t.Fatal(err)
		}
		req = &r
		return true, ""
	})
	if req.ApproversRule != expr || len(req.Approvers) != 0 || !slices.Equal(req.Roles["ops"], []string{"ann", "bob"}) {
		t.Errorf("request: approvers_rule %q, approvers %v, roles %v", req.ApproversRule, req.Approvers, req.Roles)
	}
	if err := approver.Admit(*req, "bob", true); err != nil {
		t.Errorf("bob, of ops, not admitted: %v", err)
	}
	if err := approver.Admit(*req, "ann", false); err == nil {
		t.Errorf("ann, the caller, admitted by the rule")
	}
}

// Where the agent file trusts approver keys (and the replica was given
// none), a grant over the HTTP API needs a caller the API names, as a
// decision over HTTP does. Before, only the replica's keys counted.
func TestGrantOverHTTPNeedsANamedCallerWhereTheAgentTrustsKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pub, _ := newKey(t)
	cfg := demoAgent(t)
	cfg.Trust = map[string]string{"ann": base64.StdEncoding.EncodeToString(pub)}
	o, _ := e.orch(orchestrator.Config{Agent: cfg})
	r := orchestrator.GrantRequest{By: "ann", Tool: "update_file", Approved: true}
	if _, err := o.Grant(ctxT(t), r); !errors.Is(err, orchestrator.ErrGrantForbidden) {
		t.Fatalf("grant from a caller the API does not name: %v, want ErrGrantForbidden", err)
	}
	r.Identified = true
	if _, err := o.Grant(ctxT(t), r); err != nil {
		t.Fatalf("grant from a named caller: %v", err)
	}
}
