package e2e_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// auditRecords reads every record of TOOLGATE_AUDIT.
func auditRecords(t *testing.T, b *bus.Bus) []orchestrator.AuditRecord {
	t.Helper()
	st, err := b.JetStream().Stream(clCtx(t), wire.StreamAudit)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(clCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var out []orchestrator.AuditRecord
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		raw, err := st.GetMsg(clCtx(t), seq)
		if err != nil {
			continue
		}
		var r orchestrator.AuditRecord
		if err := wire.Decode(raw.Data, raw.Header.Get(wire.HeaderContentType), &r); err != nil {
			t.Fatalf("audit record %d: %v", seq, err)
		}
		out = append(out, r)
	}
	return out
}

// Only signed decisions of trusted approvers, for the args the call was
// issued with, count; every decision, refused or applied, is kept in the
// audit stream with the approver it names, whether it was signed and why
// it was refused; refused results are kept there too (D36).
func TestDecisionsAudited(t *testing.T) {
	t.Parallel()
	sys := singleServer(t)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, otherPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	o := startOrch(t, sys, orchestrator.Config{
		Bus: inProcess(t, sys, "orchestrator"), InstanceID: "orch",
		TrustedApprovers: map[string]ed25519.PublicKey{"bot": pub},
	})
	startWorker(t, sys, inProcess(t, sys, "worker"), "worker-1", 2, 0)
	test := inProcess(t, sys, "test")
	info, err := o.StartRun(clCtx(t), seedPrompt, "")
	if err != nil {
		t.Fatal(err)
	}
	var conv *conversation.State
	clWaitFor(t, "the approvals pending", func() (bool, string) {
		conv, err = o.Conversation(clCtx(t), info.ConversationID)
		if err != nil {
			return false, err.Error()
		}
		return conv.Status == conversation.StatusPaused && conv.Batch != nil, string(conv.Status)
	})
	run := conv.Batch.RunID
	digest := map[string]string{}
	for _, pc := range conv.Batch.Calls {
		if digest[pc.ToolCallID], err = deferred.ArgsDigest(pc.Args); err != nil {
			t.Fatal(err)
		}
	}
	decide := func(call, approver string, approved bool, dig string, key ed25519.PrivateKey) {
		t.Helper()
		d := wire.Decision{RunID: run, ToolCallID: call, ArgsDigest: dig, Approved: approved, ApproverID: approver, DecidedAt: time.Now().UTC()}
		if !approved {
			d.Message = "not that file"
		}
		if key != nil {
			if err := d.Sign(key); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := test.PublishDecision(clCtx(t), d); err != nil {
			t.Fatal(err)
		}
	}
	// Refused, in turn: unsigned, signed by a key not the named
	// approver's, from an approver nobody trusts, for other args.
	decide("delete_file", "bot", true, digest["delete_file"], nil)
	decide("delete_file", "bot", true, digest["delete_file"], otherPriv)
	decide("delete_file", "mallory", true, digest["delete_file"], otherPriv)
	decide("delete_file", "bot", true, strings.Repeat("0", 64), priv)
	waitCallRefusals(t, o, conv.ID, "delete_file", 4)
	// A result for a call that was never issued is audited as refused,
	// while the run waits (here) and after its batch is over (below);
	// awaited before the decisions that end the batch, as replies are
	// handled concurrently.
	ghost := func(call string) {
		t.Helper()
		if _, err := test.PublishCallReply(clCtx(t), wire.CallReply{RunID: run, ToolCallID: call, Outcome: wire.OutcomeReturn, Value: []byte(`1`), WorkerID: "mallory"}); err != nil {
			t.Fatal(err)
		}
		clWaitFor(t, "the refused result audited", func() (bool, string) {
			for _, r := range auditRecords(t, test) {
				if r.Kind == "call" && r.ToolCallID == call {
					return r.Verdict == "refused" && r.WorkerID == "mallory" && r.Reason == "run "+run+" issued no call "+call, fmt.Sprintf("%+v", r)
				}
			}
			return false, "none"
		})
	}
	ghost("ghost")
	// Applied.
	decide("delete_file", "bot", false, digest["delete_file"], priv)
	decide("update_file_dotenv", "bot", true, digest["update_file_dotenv"], priv)
	c := waitTerminal(t, o, conv.ID)
	if c.Status != conversation.StatusCompleted {
		t.Fatalf("conversation %s: %s", c.Status, c.Error)
	}
	ghost("ghost-after")

	type row struct{ call, approver, verdict, reason string }
	var got []row
	clWaitFor(t, "six audited decisions", func() (bool, string) {
		got = got[:0]
		for _, r := range auditRecords(t, test) {
			if r.Kind != "approval" {
				continue
			}
			if r.ConversationID != conv.ID || r.RunID != run || r.Approved == nil || r.Time.IsZero() {
				t.Errorf("audit record lacks its ids, decision or time: %+v", r)
			}
			if r.Signed != (r.ApproverID == "mallory" || r.Reason != "decision from bot is not signed") {
				t.Errorf("audit record says signed=%v: %+v", r.Signed, r)
			}
			got = append(got, row{r.ToolCallID, r.ApproverID, r.Verdict, r.Reason})
		}
		return len(got) >= 6, fmt.Sprint(got)
	})
	sort.Slice(got, func(i, j int) bool { return fmt.Sprint(got[i]) < fmt.Sprint(got[j]) })
	want := []row{
		{"delete_file", "bot", "applied", ""},
		{"delete_file", "bot", "refused", "args digest of call delete_file does not match"},
		{"delete_file", "bot", "refused", "decision from bot is not signed"},
		{"delete_file", "bot", "refused", "decision from bot: " + wire.ErrBadSignature.Error()},
		{"delete_file", "mallory", "refused", `approver "mallory" is not trusted`},
		{"update_file_dotenv", "bot", "applied", ""},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("audited decisions:\n got %v\nwant %v", got, want)
	}

}

func waitCallRefusals(t *testing.T, o *orchestrator.Orchestrator, convID, callID string, n int) {
	t.Helper()
	clWaitFor(t, fmt.Sprintf("%d refusals of %s", n, callID), func() (bool, string) {
		c, err := o.Conversation(clCtx(t), convID)
		if err != nil || c.Batch == nil {
			return false, fmt.Sprint(err)
		}
		for _, pc := range c.Batch.Calls {
			if pc.ToolCallID == callID {
				return pc.Refused >= n, fmt.Sprintf("refused %d, last %q", pc.Refused, pc.LastRefusal)
			}
		}
		return false, "no call"
	})
}

// docs/security.md lists every subject each role may publish to, as
// bus.RolePermissions has them, so the documentation for a cluster cannot
// drift from what the embedded server enforces.
func TestSecurityDocListsRolePermissions(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(raw)
	for _, role := range []string{bus.RoleOrchestrator, bus.RoleWorker, bus.RoleApprover} {
		p, err := bus.RolePermissions(role)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range append(p.Publish, p.Subscribe...) {
			if !strings.Contains(section, "`"+s+"`") {
				t.Errorf("docs/security.md does not list %s's subject `%s`", role, s)
			}
		}
	}
}
