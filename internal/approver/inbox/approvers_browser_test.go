package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/browsertest"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

// waitRefused waits until the inbox has taken the request of pc and left
// it to its approvers: a decision on it is refused, not sent. Before
// inboxes knew a call's approvers, the inbox showed it and this decided it.
func waitRefused(t *testing.T, in *inbox.Inbox, pc wire.PendingCall, approve bool, reason string) {
	t.Helper()
	bustest.Poll(t, bustest.Timeout, "the inbox to leave "+pc.ToolName+" to others", func() (bool, string) {
		d, err := in.Decide(bustest.Context(t), pc.RunID, pc.ToolCallID, approver.Choice{Approve: approve, Message: "sent anyway"})
		var na *approver.NotAdmittedError
		switch {
		case err == nil:
			t.Fatalf("decided %s, a call the inbox may not decide: %+v", pc.ToolName, d)
		case errors.As(err, &na):
			if !strings.Contains(na.Reason, reason) {
				t.Fatalf("refused %s because %q, want %q", pc.ToolName, na.Reason, reason)
			}
			return true, ""
		}
		return false, err.Error()
	})
}

// Two approvers, each with an inbox, of an agent whose deploy is ann's,
// delete_file bob's, and restart anyone's but the run's caller's (ann):
// each inbox shows only what its approver may decide; a decision on a call
// not theirs, sent anyway (to the inbox's API from the page, or published
// past the inbox), is refused and says so; their own decisions apply.
func TestBrowserInboxShowsOnlyWhatItsApproverMayDecide(t *testing.T) {
	r := newOpsRig(t)
	conv, pending := r.start(t, `{"id":"ann","name":"Ann"}`)
	dep, del, rst := callOf(t, pending, "deploy"), callOf(t, pending, "delete_file"), callOf(t, pending, "restart")
	ann, bob := r.inboxes["ann"], r.inboxes["bob"]

	waitTools(t, ann, "deploy")
	waitTools(t, bob, "delete_file,restart")
	waitRefused(t, ann, del, false, `approver "ann" may not decide tool delete_file (approvers: bob)`)
	waitRefused(t, ann, rst, true, `approver "ann" is the run's caller: it may not approve its own call`)
	waitRefused(t, bob, dep, true, `approver "bob" may not decide tool deploy (approvers: ann)`)
	if got := bustest.Decisions(t, r.test, dep.RunID); len(got) != 0 {
		t.Fatalf("decisions published: %+v", got)
	}

	br := browsertest.Start(t, 60*time.Second)
	run, shot := br.Run, br.Shot
	card := func(call string) string { return `article.card[data-call="` + call + `"]` }
	count := func(into *string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			v, err := chromedp.Text(chromedp.CSS(`#count`))(ctx, tg)
			*into = v
			return err
		})
	}
	// decideAnyway posts a decision on call to the page's inbox as the
	// page's own script would, and returns the status and error it got.
	decideAnyway := func(pc wire.PendingCall, approve bool, into *string) chromedp.Action[chromedp.Void] {
		js := fmt.Sprintf(`fetch("/api/decide", {method: "POST", headers: {"Content-Type": "application/json"},
			body: JSON.stringify({run_id: %q, tool_call_id: %q, approve: %t})})
			.then(r => r.json().then(d => r.status + " " + d.error))`, pc.RunID, pc.ToolCallID, approve)
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			v, err := chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise)(ctx, tg)
			*into = v
			return err
		})
	}

	var n, refusedDel, refusedRst string
	run("ann's inbox shows deploy only",
		chromedp.Navigate(r.pages["ann"].URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(card(dep.ToolCallID))),
		count(&n),
		shot("approvers-01-ann"),
		decideAnyway(del, false, &refusedDel),
		decideAnyway(rst, true, &refusedRst),
	)
	if n != "1" {
		t.Errorf("ann's count shows %s, want 1 (deploy)", n)
	}
	for _, c := range []string{del.ToolCallID, rst.ToolCallID} {
		if present, err := chromedp.Run(br.Ctx, chromedp.Evaluate[bool](`document.querySelector('`+card(c)+`') !== null`)); err != nil || present {
			t.Errorf("ann's page shows call %s (%v)", c, err)
		}
	}
	if !strings.HasPrefix(refusedDel, "403 ") || !strings.Contains(refusedDel, "refused: approver \"ann\" may not decide tool delete_file") {
		t.Errorf("a denial of bob's delete_file sent from ann's page: %s", refusedDel)
	}
	if !strings.HasPrefix(refusedRst, "403 ") || !strings.Contains(refusedRst, "may not approve its own call") {
		t.Errorf("ann's approval of her own run's restart: %s", refusedRst)
	}

	run("bob's inbox shows delete_file and restart",
		chromedp.Navigate(r.pages["bob"].URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(card(del.ToolCallID))),
		chromedp.WaitVisible(chromedp.CSS(card(rst.ToolCallID))),
		count(&n),
		shot("approvers-02-bob"),
	)
	if n != "2" {
		t.Errorf("bob's count shows %s, want 2", n)
	}
	if present, err := chromedp.Run(br.Ctx, chromedp.Evaluate[bool](`document.querySelector('`+card(dep.ToolCallID)+`') !== null`)); err != nil || present {
		t.Errorf("bob's page shows ann's deploy (%v)", err)
	}
	run("bob approves his",
		chromedp.Click(chromedp.CSS(card(del.ToolCallID)+` button[data-action="approve"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card(del.ToolCallID))),
		chromedp.Click(chromedp.CSS(card(rst.ToolCallID)+` button[data-action="approve"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card(rst.ToolCallID))),
	)
	if got := bustest.Decisions(t, r.test, dep.RunID); len(got) != 2 {
		t.Errorf("decisions on the bus: %+v, want bob's two", got)
	}

	// Past the inbox, signed with ann's key: the orchestrator refuses it
	// and says so to the sender.
	d, err := approver.NewDecision(requestOfCall(t, dep.RunID, del), "ann", approver.Choice{Message: "mine now"}, r.keys["ann"], time.Now())
	if err != nil {
		t.Fatal(err)
	}
	err = approver.SendDecision(bustest.Context(t), r.test, d, 20*time.Second)
	var refused *approver.RefusedError
	if !errors.As(err, &refused) || !strings.Contains(refused.Reason, "may not decide tool delete_file") {
		t.Errorf("ann's decision on delete_file published past her inbox: %v", err)
	}
	c, err := r.orch.Conversation(bustest.Context(t), conv)
	if err != nil {
		t.Fatal(err)
	}
	for _, pc := range c.PendingCalls() {
		if pc.ToolName != "deploy" && pc.Kind == wire.ReplyKindApproval {
			t.Errorf("%s still waits for a decision", pc.ToolName)
		}
	}
}

// requestOfCall is the approval request of pending call pc of run, as far
// as a decision needs it.
func requestOfCall(t *testing.T, run string, pc wire.PendingCall) wire.ApprovalRequest {
	t.Helper()
	digest, err := wire.DigestArgs(pc.Args)
	if err != nil {
		t.Fatal(err)
	}
	return wire.ApprovalRequest{RunID: run, ConversationID: pc.ConversationID, ToolCallID: pc.ToolCallID,
		ToolName: pc.ToolName, Args: pc.Args, ArgsDigest: digest, Deadline: pc.Deadline}
}
