package orchestrator_test

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// digestOf is the args digest of args.
func digestOf(t *testing.T, args string) string {
	t.Helper()
	d, err := wire.DigestArgs(json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// dotenvArgs are the args of the seed's update of .env.
const dotenvArgs = `{"path":".env","content":""}`

// auditOf is the audit records of run runID.
func auditOf(t *testing.T, b *bus.Bus, runID string) []wire.AuditRecord {
	t.Helper()
	subj, err := wire.AuditSubject(runID)
	if err != nil {
		t.Fatal(err)
	}
	var out []wire.AuditRecord
	for _, m := range bustest.Messages(t, b, wire.StreamAudit, subj) {
		var rec wire.AuditRecord
		if err := wire.Decode(m.Data(), m.Headers().Get("Content-Type"), &rec); err != nil {
			t.Fatal(err)
		}
		out = append(out, rec)
	}
	return out
}

// Calls that standing decisions cover are decided when their run pauses,
// before anyone is asked: the approved .env update goes to the worker with
// the batch's calls, the delete is denied by a standing denial, no
// approval request is published, each decision names its grant, and each
// use is audited.
func TestGrantedCallsGoOutWithoutAsking(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sandbox := e.worker()
	o, _ := e.orch(orchestrator.Config{})
	allow, err := o.Grant(ctxT(t), orchestrator.GrantRequest{By: "ann", Tool: "update_file", Approved: true, ArgsDigest: digestOf(t, dotenvArgs)})
	if err != nil {
		t.Fatal(err)
	}
	deny, err := o.Grant(ctxT(t), orchestrator.GrantRequest{By: "ann", Tool: "delete_file", Message: "Deleting files is not allowed"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := o.StartRun(ctxT(t), seedPrompt, "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	checkSeedHistory(t, c)
	b := e.connect("test")
	if n := bustest.StreamMsgs(t, b, wire.StreamApprovals); n != 0 {
		t.Errorf("%d approval requests published, want none", n)
	}
	if env, err := os.ReadFile(filepath.Join(sandbox, ".env")); err != nil || len(env) != 0 {
		t.Errorf(".env = %q, %v; want written empty by the worker", env, err)
	}
	want := map[string]string{"update_file_dotenv": allow.ID, "delete_file": deny.ID}
	for _, d := range c.Decisions {
		if g, ok := want[d.ToolCallID]; !ok || d.GrantID != g || d.ApproverID != "grant:"+g || d.Approved != (g == allow.ID) {
			t.Errorf("decision %+v, want one by grant %q", d, g)
		}
	}
	if len(c.Decisions) != 2 {
		t.Errorf("%d decisions, want 2", len(c.Decisions))
	}
	runID := c.Runs[0].RunID
	waitFor(t, "the audit records of the grants' uses", func() (bool, string) {
		recs := auditOf(t, b, runID)
		got := map[string]string{}
		for _, r := range recs {
			if r.Verdict == "applied" && r.Approved != nil && *r.Approved == (r.Grant == allow.ID) {
				got[r.ToolCallID] = r.Grant
			}
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(recs)
	})
}

// A grant decides only the calls it covers while it is in force: one
// for other args, one expired, one revoked or one for another caller
// leaves the call to be asked about, as if there were none; one for the
// run's caller decides it.
func TestGrantsThatDoNotApplyAskAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		grant   orchestrator.GrantRequest
		expires time.Duration // after the grant is given; 0: never
		revoke  bool
		elapse  time.Duration
		caller  string
		granted bool
	}{
		{name: "other args", grant: orchestrator.GrantRequest{ArgsDigest: digestOf(t, `{"path":".env","content":"x"}`)}},
		{name: "expired", expires: time.Minute, elapse: 2 * time.Minute},
		{name: "in force", expires: time.Minute, granted: true},
		{name: "revoked", revoke: true},
		{name: "another caller", grant: orchestrator.GrantRequest{Caller: "bob"}, caller: `{"id":"ann"}`},
		{name: "the run's caller", grant: orchestrator.GrantRequest{Caller: "ann"}, caller: `{"id":"ann"}`, granted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.worker()
			clock := &steppedClock{now: time.Now()}
			o, _ := e.orch(orchestrator.Config{Clock: clock.Now})
			r := tc.grant
			r.By, r.Tool, r.Approved = "bob", "update_file", true
			if tc.expires > 0 {
				r.ExpiresAt = clock.Now().Add(tc.expires)
			}
			g, err := o.Grant(ctxT(t), r)
			if err != nil {
				t.Fatal(err)
			}
			if tc.revoke {
				if err := o.RevokeGrant(ctxT(t), g.ID); err != nil {
					t.Fatal(err)
				}
				if err := o.RevokeGrant(ctxT(t), g.ID); !errors.Is(err, orchestrator.ErrNotFound) {
					t.Errorf("revoked twice: %v, want ErrNotFound", err)
				}
			}
			clock.step(tc.elapse)
			info, err := o.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: seedPrompt, Caller: json.RawMessage(tc.caller)})
			if err != nil {
				t.Fatal(err)
			}
			c := waitStatus(t, o, info.ConversationID, conversation.StatusPaused)
			pc := pendingCall(t, c, "update_file_dotenv")
			if granted := pc.Decision() != nil; granted != tc.granted {
				t.Fatalf("update_file_dotenv decided: %v (%+v), want %v", granted, pc.Decision(), tc.granted)
			}
			b := e.connect("test")
			if !tc.granted {
				// Asked: its approval request is published with the
				// delete's.
				waitFor(t, "two approval requests", func() (bool, string) {
					n := bustest.StreamMsgs(t, b, wire.StreamApprovals)
					return n == 2, fmt.Sprint(n)
				})
				return
			}
			if pc.Decision().By != "grant:"+g.ID {
				t.Errorf("decided by %q, want the grant", pc.Decision().By)
			}
			waitFor(t, "the delete's approval request", func() (bool, string) {
				n := bustest.StreamMsgs(t, b, wire.StreamApprovals)
				return n == 1, fmt.Sprint(n)
			})
		})
	}
}

// A grant an approver puts on the bus (package approval) applies, where
// approver keys are trusted, only when signed by the key of the approver
// it names; one unsigned or signed by another key is listed with why it
// is ignored, and the call is asked about.
func TestBusGrantsAreSignedWhereKeysAreTrusted(t *testing.T) {
	t.Parallel()
	pub, key := newKey(t)
	_, other := newKey(t)
	for _, tc := range []struct {
		name    string
		key     ed25519.PrivateKey
		ignored string
	}{
		{"signed by the trusted key", key, ""},
		{"unsigned", nil, "not signed"},
		{"signed by another key", other, "does not verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.worker()
			o, _ := e.orch(orchestrator.Config{TrustedApprovers: map[string]ed25519.PublicKey{"bot": pub}})
			g, gs := giveDotenvGrant(t, e, o, tc.key)
			if len(gs) != 1 || gs[0].ID != g.ID || gs[0].Source != wire.GrantKeyBus || !strings.Contains(gs[0].Ignored, tc.ignored) || (tc.ignored == "") != (gs[0].Ignored == "") {
				t.Fatalf("grants listed %+v, want %s ignored for %q", gs, g.ID, tc.ignored)
			}
			info, err := o.StartRun(ctxT(t), seedPrompt, "")
			if err != nil {
				t.Fatal(err)
			}
			c := waitStatus(t, o, info.ConversationID, conversation.StatusPaused)
			if d := pendingCall(t, c, "update_file_dotenv").Decision(); (d != nil) != (tc.ignored == "") {
				t.Errorf("update_file_dotenv decided %+v; want decided only by a grant signed by the trusted key", d)
			}
			if err := approval.RevokeGrant(ctxT(t), e.connect("revoker").Conn(), g.ID); err != nil {
				t.Fatal(err)
			}
			if gs, err := o.Grants(ctxT(t)); err != nil || len(gs) != 0 {
				t.Errorf("grants after the revoke: %+v, %v", gs, err)
			}
		})
	}
}

// giveDotenvGrant gives, as bot, a grant of update_file on dotenvArgs signed
// with key, waits until o's watch has seen it, and returns it with o's
// grants as listed then.
func giveDotenvGrant(t *testing.T, e *env, o *orchestrator.Orchestrator, key ed25519.PrivateKey) (approval.Grant, []orchestrator.StoredGrant) {
	t.Helper()
	nc := e.connect("bot").Conn()
	g, err := approval.GiveGrant(ctxT(t), nc, approval.Grant{Tool: "update_file", Approved: true, GrantedBy: "bot",
		ArgsDigest: digestOf(t, dotenvArgs)}, key)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the grant seen by the orchestrator's watch", func() (bool, string) {
		return orchestrator.GrantSeen(o, g.ID), ""
	})
	gs, err := o.Grants(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return g, gs
}
