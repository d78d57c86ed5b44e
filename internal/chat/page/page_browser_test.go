package page_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/browsertest"
	"github.com/toolgate/toolgate/internal/chat/agui"
	"github.com/toolgate/toolgate/internal/chat/chattest"
	"github.com/toolgate/toolgate/internal/chat/page"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/testkit"
)

// chatAgent: delete_file waits for a decision, local_time and confirm are
// the page's own tools.
const chatAgent = `
name: chat
model: {provider: script, script: script.yaml}
tools:
  - name: delete_file
    description: Delete a file in the sandbox.
    parameters:
      type: object
      properties: {path: {type: string}}
      required: [path]
      additionalProperties: false
    approval: always
    approval_metadata: {reason: deleting needs a human}
  - name: local_time
    executor: frontend
  - name: confirm
    executor: frontend
    parameters: {type: object, properties: {message: {type: string}}, required: [message]}
`

// chatScript: response n answers a history holding n model responses, so
// each prompt of the test gets a call, then the text after its answer.
const chatScript = `
- calls: [{tool: delete_file, id: del_old, args: {path: old.txt}}]
- text: Deleted old.txt as you approved.
- calls:
    - {tool: delete_file, id: del_keep, args: {path: keep.txt}}
    - {tool: delete_file, id: del_typo, args: {path: tpm.txt}}
- text: Understood, keep.txt stays where it is.
- calls: [{tool: local_time, id: time_now}]
- text: Thanks, I have your local time now.
- calls: [{tool: confirm, id: ask_trash, args: {message: Empty the trash?}}]
- text: You confirmed, so the trash is empty.
`

const (
	annToken = "ann-secret-token"
	denyMsg  = "Keep it, it matters"
	// browserTZ is an unusual zone (UTC+12:45), so that only the
	// browser's own clock can have produced it.
	browserTZ = "Pacific/Chatham"
)

// TestChatPage drives the chat page in headless Chromium against the real
// orchestrator (script model, a worker of the file tools) behind an API
// with a user's token: the page asks for the token once; a prompt's
// approval card is approved and the follow-up run's answer streams in; of
// the next two, one is denied with a message, the other approved with
// edited args, and the model's next text appears; a
// local_time call is answered by the page with the browser's clock and a
// confirm call through the page's dialog, and both values are in the
// conversation's stored history.
func TestChatPage(t *testing.T) {
	t.Parallel()
	sys := testkit.Test(t, testkit.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := chattest.Orchestrator(ctx, t, sys, chattest.Agent(t, chatAgent, map[string]string{"script.yaml": chatScript}))
	box := chattest.Files(ctx, t, sys, map[string]string{"old.txt": "old.txt", "keep.txt": "keep.txt", "tmp.txt": "tmp.txt"}, "delete_file")
	sum := sha256.Sum256([]byte(annToken))
	users, err := api.ParseUsers([]byte("users:\n  - {name: ann, token_sha256: " + hex.EncodeToString(sum[:]) + "}\n"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(page.Handler(api.Handler(o, api.Config{Users: users,
		Routes: map[string]http.Handler{"POST /v1/agui": agui.Handler(o, agui.Config{})}})))
	t.Cleanup(srv.Close)

	br := browsertest.Start(t, 90*time.Second, chromedp.Env("TZ="+browserTZ))
	run, shot := br.Run, br.Shot
	var thread string
	conv := func() *conversation.State {
		t.Helper()
		c, err := o.Conversation(ctx, agui.ConversationID(thread))
		if err != nil {
			t.Fatalf("conversation of thread %s: %v", thread, err)
		}
		return c
	}
	br.OnFailure = func() {
		if thread == "" {
			return
		}
		if c, err := o.Conversation(ctx, agui.ConversationID(thread)); err == nil {
			b, _ := json.MarshalIndent(c, "", "  ")
			t.Logf("conversation:\n%s", b)
		}
	}
	// until waits for a JavaScript condition on the page.
	// assistant is whether an assistant bubble says text, streamed in
	// more than one delta.
	assistant := func(text string) chromedp.Action[chromedp.Void] {
		return until(fmt.Sprintf(`[...document.querySelectorAll('.msg-assistant .bubble')].some(b => b.textContent === %q && !b.classList.contains('streaming') && Number(b.dataset.deltas) > 1)`, text))
	}
	card := func(call string) string { return `article.approval[data-call="` + call + `"]` }

	run("open the page",
		chromedp.Navigate(srv.URL+page.Path),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) (err error) {
			thread, err = chromedp.Text(chromedp.CSS(`#thread`))(ctx, tg)
			return err
		}),
	)
	if thread == "" {
		t.Fatal("the page shows no thread id")
	}

	run("send a prompt, give the token the page asks for, see the approval card",
		say("Delete old.txt"),
		chromedp.WaitVisible(chromedp.CSS(`#token-dialog`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), annToken),
		chromedp.Click(chromedp.CSS(`#token-ok`)),
		chromedp.WaitVisible(chromedp.CSS(card("del_old"))),
		chromedp.WaitVisible(chromedp.CSS(`article.tool[data-call="del_old"]`)),
		until(`document.querySelector('#status').dataset.state === 'waiting'`),
	)
	var reason string
	run("read the card", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) (err error) {
		reason, err = chromedp.Text(chromedp.CSS(card("del_old")+` [data-field="reason"]`))(ctx, tg)
		return err
	}))
	if !strings.Contains(reason, "deleting needs a human") {
		t.Errorf("the card's reason says %q, want the tool's approval_metadata", reason)
	}
	if tok, err := chromedp.Run(br.Ctx, chromedp.Evaluate[string](`sessionStorage.getItem('toolgate.chat.token')`)); err != nil || tok != annToken {
		t.Errorf("sessionStorage token = %q, %v", tok, err)
	}

	run("approve: the follow-up run's answer streams in",
		chromedp.Click(chromedp.CSS(card("del_old")+` button[data-action="approve"]`)),
		assistant("Deleted old.txt as you approved."),
		until(`document.querySelector('#status').dataset.state === 'idle'`),
		shot("01-approved"),
	)
	if _, err := os.Stat(filepath.Join(box, "old.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old.txt after the approval: %v, want it deleted", err)
	}

	run("two cards: deny one with a message, approve the other with edited args; the model's next text appears",
		say("Delete keep.txt and tmp.txt"),
		chromedp.WaitVisible(chromedp.CSS(card("del_keep"))),
		chromedp.WaitVisible(chromedp.CSS(card("del_typo"))),
		chromedp.SendKeys(chromedp.CSS(card("del_keep")+` input[data-role="message"]`), denyMsg),
		shot("02-approval-cards"),
		chromedp.Click(chromedp.CSS(card("del_keep")+` button[data-action="deny"]`)),
		chromedp.Click(chromedp.CSS(card("del_typo")+` button[data-action="edit"]`)),
		chromedp.SetValue(chromedp.CSS(card("del_typo")+` textarea[data-role="args"]`), `{"path": "tmp.txt"}`),
		chromedp.Click(chromedp.CSS(card("del_typo")+` button[data-action="approve-edited"]`)),
		assistant("Understood, keep.txt stays where it is."),
	)
	if _, err := os.Stat(filepath.Join(box, "keep.txt")); err != nil {
		t.Errorf("keep.txt after the denial: %v", err)
	}
	if _, err := os.Stat(filepath.Join(box, "tmp.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("tmp.txt after the approval with edited args: %v, want it deleted", err)
	}

	run("a local_time call is answered by the page",
		say("What time is it for me?"),
		chromedp.WaitVisible(chromedp.CSS(`article.tool.frontend[data-call="time_now"]`)),
		assistant("Thanks, I have your local time now."),
	)
	run("a confirm call shows a dialog in the page",
		say("Clean up, if I agree"),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-dialog`)),
		until(`document.querySelector('#confirm-message').textContent === 'Empty the trash?'`),
		shot("03-confirm-dialog"),
		chromedp.Click(chromedp.CSS(`#confirm-yes`)),
		chromedp.WaitNotVisible(chromedp.CSS(`#confirm-dialog`)),
		assistant("You confirmed, so the trash is empty."),
		until(`document.querySelector('#status').dataset.state === 'idle'`),
		shot("04-chat"),
	)

	// The stored history: the denial with the user's message, the values
	// the page gave, all decided by the token's user.
	c := conv()
	returns := map[string]agent.Part{}
	for _, m := range c.History {
		for _, p := range m.Parts {
			if p.Kind == agent.PartToolReturn {
				returns[p.ToolCallID] = p
			}
		}
	}
	if p := returns["del_keep"]; p.Outcome != agent.OutcomeDenied || !strings.Contains(string(p.Value), denyMsg) {
		t.Errorf("del_keep return = %+v, want denied with %q", p, denyMsg)
	}
	if p := returns["del_old"]; p.Outcome != agent.OutcomeSuccess {
		t.Errorf("del_old return = %+v, want success", p)
	}
	var tm struct {
		LocalTime string `json:"local_time"`
		TimeZone  string `json:"time_zone"`
		Offset    int    `json:"utc_offset_minutes"`
	}
	if err := json.Unmarshal(returns["time_now"].Value, &tm); err != nil || tm.TimeZone != browserTZ || tm.LocalTime == "" || tm.Offset%60 != 45 {
		t.Errorf("local_time value in the history = %s (%v), want the browser's clock in %s", returns["time_now"].Value, err, browserTZ)
	}
	if v := string(returns["ask_trash"].Value); v != `{"confirmed":true}` {
		t.Errorf("confirm value in the history = %s, want {\"confirmed\":true}", v)
	}
	by := map[string]string{}
	for _, d := range c.Decisions {
		by[d.ToolCallID] = d.ApproverID
		if d.ToolCallID == "del_typo" && string(d.OverrideArgs) != `{"path":"tmp.txt"}` {
			t.Errorf("del_typo approved with override args %s, want the edited ones", d.OverrideArgs)
		}
	}
	if by["del_old"] != "ann" || by["del_keep"] != "ann" || by["del_typo"] != "ann" {
		t.Errorf("decisions by %v, want ann (the token's user)", by)
	}
	if c.Status != conversation.StatusCompleted || len(c.Runs) < 4 {
		t.Errorf("conversation %s with %d runs, want completed after the four prompts", c.Status, len(c.Runs))
	}

	// The script has no fifth answer: the run fails, and the page says
	// why and takes prompts again.
	run("a failed run shows its error",
		say("And now?"),
		until(`[...document.querySelectorAll('.notice.run-error')].some(n => n.textContent.includes('exhausted'))`),
		until(`document.querySelector('#status').dataset.state === 'error' && !document.querySelector('#send').disabled`),
	)
}

// until waits for the page's condition cond to hold.
func until(cond string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(40*time.Second))
}

// say sends text as the user's prompt.
func say(text string) chromedp.Action[chromedp.Void] {
	return seq(
		chromedp.WaitEnabled(chromedp.CSS(`#send`)),
		chromedp.SendKeys(chromedp.CSS(`#prompt`), text),
		chromedp.Click(chromedp.CSS(`#send`)),
	)
}

// seq is steps as one action.
func seq(steps ...chromedp.Action[chromedp.Void]) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for _, step := range steps {
			if _, err := step(ctx, tg); err != nil {
				return err
			}
		}
		return nil
	})
}
