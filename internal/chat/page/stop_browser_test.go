package page_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/browsertest"
	"github.com/toolgate/toolgate/internal/chat/agui"
	"github.com/toolgate/toolgate/internal/chat/chattest"
	"github.com/toolgate/toolgate/internal/chat/page"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/testkit"
)

// stopAgent's calls wait: delete_file for a decision, then (like
// slow_job) for a worker that never comes.
const stopAgent = `
name: stop
model: {provider: script, script: script.yaml}
tools:
  - name: delete_file
    parameters: {type: object, properties: {path: {type: string}}, required: [path]}
    approval: always
  - name: slow_job
`

const stopScript = `
- calls:
    - {tool: delete_file, id: del, args: {path: a.txt}}
    - {tool: slow_job, id: job}
- text: never reached
`

// TestChatPageStop: Stop cancels the conversation, on a tokenless API (as
// on loopback). While approvals wait, their cards are withdrawn; while a
// run streams (the approved call waits for a worker), the run ends with
// the cancelled outcome.
func TestChatPageStop(t *testing.T) {
	t.Parallel()
	sys := testkit.Test(t, testkit.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := chattest.Orchestrator(ctx, t, sys, chattest.Agent(t, stopAgent, map[string]string{"script.yaml": stopScript}))
	srv := httptest.NewServer(page.Handler(api.Handler(o, api.Config{
		// Keep-alive comments every 50ms while the run waits: the page's
		// parser must pass over them.
		Routes: map[string]http.Handler{"POST /v1/agui": agui.Handler(o, agui.Config{KeepAlive: 50 * time.Millisecond})}})))
	t.Cleanup(srv.Close)

	br := browsertest.Start(t, 60*time.Second)
	var thread string
	readThread := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) (err error) {
		thread, err = chromedp.Text(chromedp.CSS(`#thread`))(ctx, tg)
		return err
	})
	cancelled := func(what string) {
		t.Helper()
		c, err := o.Conversation(ctx, agui.ConversationID(thread))
		if err != nil {
			t.Fatalf("%s: conversation of thread %s: %v", what, thread, err)
		}
		if c.Status != conversation.StatusCancelled {
			t.Errorf("%s: conversation %s, want cancelled", what, c.Status)
		}
	}
	card := `article.approval[data-call="del"]`

	br.Run("stop while an approval waits",
		chromedp.Navigate(srv.URL+page.Path),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)),
		readThread,
		say("Delete a.txt, then the slow job"),
		chromedp.WaitVisible(chromedp.CSS(card)),
		chromedp.WaitVisible(chromedp.CSS(`#stop`)),
		chromedp.Click(chromedp.CSS(`#stop`)),
		until(`document.querySelector('#status').dataset.state === 'cancelled' && document.querySelector('.notice.cancelled') !== null`),
		until(`document.querySelector('`+card+` button[data-action="approve"]').disabled`),
	)
	cancelled("stopped while waiting")

	br.Run("stop while a run streams",
		chromedp.Click(chromedp.CSS(`#new-chat`)),
		readThread,
		say("Delete a.txt, then the slow job"),
		chromedp.WaitVisible(chromedp.CSS(card)),
		chromedp.Click(chromedp.CSS(card+` button[data-action="approve"]`)),
		// running: the endpoint took the resume and streams the run.
		until(`document.querySelector('#status').dataset.state === 'running'`),
		until(`Number(document.querySelector('#status').dataset.keepalives) >= 2`),
		chromedp.WaitVisible(chromedp.CSS(`#stop`)),
		chromedp.Click(chromedp.CSS(`#stop`)),
		// The stream's own end: RUN_FINISHED with the cancelled outcome.
		until(`document.querySelector('#status').dataset.state === 'cancelled' && document.querySelector('.notice.cancelled') !== null`),
		br.Shot("05-stopped"),
	)
	cancelled("stopped while running")
}
