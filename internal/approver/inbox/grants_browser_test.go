package inbox_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/browsertest"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// approvalRequested reports whether an approval request was published
// for call of run.
func approvalRequested(t *testing.T, b *bus.Bus, tool, run, call string) bool {
	t.Helper()
	subj, err := wire.ApprovalSubject(tool)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range bustest.Messages(t, b, wire.StreamApprovals, subj) {
		var req wire.ApprovalRequest
		if err := wire.Decode(m.Data(), m.Headers().Get(wire.HeaderContentType), &req); err != nil {
			t.Fatal(err)
		}
		if req.RunID == run && req.ToolCallID == call {
			return true
		}
	}
	return false
}

// In headless Chromium, ann approves deploy with "Always allow… with these
// exact args": a grant signed with her key stands in the page's list, and
// the next conversation's identical deploy goes out to its workers with no
// approval request; once she revokes it, the one after asks again.
func TestBrowserInboxAlwaysAllow(t *testing.T) {
	r := newOpsRig(t)
	ctx := bustest.Context(t)
	_, first := r.start(t, `{"id":"carol"}`)
	dep := callOf(t, first, "deploy")
	ann := r.inboxes["ann"]
	waitTools(t, ann, "deploy,restart")

	br := browsertest.Start(t, 90*time.Second)
	run, shot := br.Run, br.Shot
	card := func(run, call string) string { return `article.card[data-key="` + run + `/` + call + `"]` }
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(br.Ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	depCard := card(dep.RunID, dep.ToolCallID)
	run("open ann's inbox; always allow deploy with these args",
		chromedp.Navigate(r.pages["ann"].URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#grants-empty`)),
		chromedp.WaitVisible(chromedp.CSS(depCard)),
		chromedp.Click(chromedp.CSS(depCard+` details.grant summary`)),
		chromedp.WaitVisible(chromedp.CSS(depCard+` [data-role="grant-args"]`)),
		chromedp.Click(chromedp.CSS(depCard+` [data-role="grant-conversation"]`)),
		chromedp.Click(chromedp.CSS(depCard+` [data-role="grant-args"]`)),
		chromedp.SetValue(chromedp.CSS(depCard+` [data-role="grant-for"]`), "24h"),
		shot("grants-01-always-allow"),
		chromedp.Click(chromedp.CSS(depCard+` button[data-action="grant"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(depCard)),
		chromedp.WaitVisible(chromedp.CSS(`#grants tr[data-grant]`)),
		shot("grants-02-granted"),
	)
	if f := text(`#flash`); !strings.Contains(f, "Approved deploy (dep) and always allowed it with these args until") || !strings.Contains(f, "signed") {
		t.Errorf("flash says %q", f)
	}
	if row := text(`#grants tr[data-grant]`); !strings.Contains(row, "deploy") || !strings.Contains(row, "with these args") || !strings.Contains(row, "ann") {
		t.Errorf("grant row %q", row)
	}
	gs, err := ann.Grants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 || gs[0].Tool != "deploy" || gs[0].ArgsDigest == "" || gs[0].ConversationID != "" || gs[0].Source != wire.GrantKeyBus ||
		len(gs[0].Signature) == 0 || gs[0].ExpiresAt.Sub(gs[0].GrantedAt) != 24*time.Hour {
		t.Fatalf("grants %+v, want ann's signed one for deploy's args, for a day", gs)
	}
	if d := bustest.Decisions(t, r.test, dep.RunID); len(d) != 1 || !d[0].Approved || d[0].ToolCallID != dep.ToolCallID {
		t.Errorf("decisions on the first run %+v, want ann's approval of deploy", d)
	}

	// The same calls in a new conversation: deploy goes out at once.
	conv2, second := r.start(t, `{"id":"dave"}`)
	dep2 := callOf(t, second, "deploy")
	if dep2.Kind != wire.ReplyKindCall {
		t.Errorf("second deploy waits for %s, want its result (dispatched by the grant)", dep2.Kind)
	}
	if approvalRequested(t, r.test, "deploy", dep2.RunID, dep2.ToolCallID) {
		t.Error("an approval request was published for the granted deploy")
	}
	c2, err := r.orch.Conversation(ctx, conv2)
	if err != nil {
		t.Fatal(err)
	}
	if got := decidedBy(c2, "dep"); got != orchestrator.GrantedByPrefix+gs[0].ID {
		t.Errorf("second deploy decided by %q, want the grant", got)
	}
	// Published after the pause is stored.
	bustest.Poll(t, bustest.Timeout, "restart, which no grant covers, asked about", func() (bool, string) {
		return approvalRequested(t, r.test, "restart", dep2.RunID, "rst"), ""
	})

	run("revoke the grant",
		chromedp.Click(chromedp.CSS(`#grants tr[data-grant] button[data-action="revoke"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#grants-empty`)),
		chromedp.WaitNotPresent(chromedp.CSS(`#grants tr[data-grant]`)),
	)
	bustest.Poll(t, bustest.Timeout, "the grant gone from the bucket", func() (bool, string) {
		gs, err := ann.Grants(ctx)
		return err == nil && len(gs) == 0, ""
	})
	// The orchestrator learns of the revocation from its watch of the
	// bucket: a later conversation asks again once it has.
	bustest.Poll(t, bustest.Timeout, "a deploy asked about again", func() (bool, string) {
		_, pcs := r.start(t, `{"id":"erin"}`)
		d := callOf(t, pcs, "deploy")
		return d.Kind == wire.ReplyKindApproval, d.Kind
	})
	run("the deploy of the latest conversation is on ann's page",
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[chromedp.Void](`document.querySelectorAll('article.card[data-call="dep"]').length >= 1`,
				chromedp.WithPollingTimeout(20*time.Second))(ctx, tg)
			return err
		}),
		shot("grants-03-asked-again"),
	)
}

// decidedBy is the approver of the decision applied to call of c's
// latest batch; "" when none is.
func decidedBy(c *conversation.State, call string) string {
	for _, pc := range c.Batch.Calls {
		if pc.ToolCallID != call {
			continue
		}
		if d := pc.Decision(); d != nil {
			return d.By
		}
	}
	return ""
}

// No grant is given for a call its approver may not decide, nor for the
// caller of a run that has no caller id; revoking a grant that is not
// there says so.
func TestAlwaysAllowRefusals(t *testing.T) {
	r := newOpsRig(t)
	ctx := bustest.Context(t)
	_, pcs := r.start(t, "")
	dep := callOf(t, pcs, "deploy")
	ann, bob := r.inboxes["ann"], r.inboxes["bob"]
	waitTools(t, ann, "deploy,restart")
	waitRefused(t, bob, dep, true, `approver "bob" may not decide tool deploy`)

	_, _, err := bob.AlwaysAllow(ctx, dep.RunID, dep.ToolCallID, inbox.Scope{Args: true})
	var na *approver.NotAdmittedError
	if !errors.As(err, &na) {
		t.Errorf("bob's grant for ann's deploy: %v, want refused", err)
	}
	if _, _, err := ann.AlwaysAllow(ctx, dep.RunID, dep.ToolCallID, inbox.Scope{Caller: true}); !errors.Is(err, inbox.ErrNoCallerID) {
		t.Errorf("a grant for the caller of a run without one: %v", err)
	}
	if gs, err := ann.Grants(ctx); err != nil || len(gs) != 0 {
		t.Errorf("grants %+v (%v), want none", gs, err)
	}
	if d := bustest.Decisions(t, r.test, dep.RunID); len(d) != 0 {
		t.Errorf("decisions %+v, want none", d)
	}
	if err := ann.RevokeGrant(ctx, "gnone"); !errors.Is(err, bus.ErrGrantNotFound) {
		t.Errorf("revoke of no grant: %v", err)
	}
}

// An inbox with the orchestrator's API lists, with each grant, why the
// orchestrator ignores it: one given by an inbox without a key, where the
// replica trusts approver keys, is not applied, and says so.
func TestInboxGrantsSayWhichTheOrchestratorIgnores(t *testing.T) {
	r := newOpsRig(t)
	ctx := bustest.Context(t)
	srv := httptest.NewServer(api.Handler(r.orch.Orchestrator, api.Config{Logger: bustest.Logger(t)}))
	t.Cleanup(srv.Close)
	unsigned, _ := startInbox(t, inbox.Config{Bus: r.connect(t, "ann-unsigned"), ID: "ann", Durable: "ann-unsigned",
		Orchestrator: &client.Client{BaseURL: srv.URL}})
	_, pcs := r.start(t, "")
	dep := callOf(t, pcs, "deploy")
	waitTools(t, unsigned, "deploy,restart")
	g, _, err := unsigned.AlwaysAllow(ctx, dep.RunID, dep.ToolCallID, inbox.Scope{Args: true})
	if g.ID == "" {
		t.Fatalf("no grant given: %v", err)
	}
	gs, err := unsigned.Grants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 || gs[0].ID != g.ID || !strings.Contains(gs[0].Ignored, "not signed") {
		t.Errorf("grants %+v, want the unsigned one ignored as not signed", gs)
	}
}
