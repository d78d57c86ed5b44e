package page_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
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

// TestChatPageDemo plays what `make run APPROVER=none` offers in the page,
// on the built-in demo agent and a worker of the built-in tools: the
// seed's approvals decided in the page (the delete denied, the .env
// update approved with edited args) and its summary, then the demo's
// local_time and confirm turns answered by the browser.
func TestChatPageDemo(t *testing.T) {
	t.Parallel()
	sys := testkit.Test(t, testkit.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := chattest.Orchestrator(ctx, t, sys, chattest.Demo(t))
	box := chattest.Files(ctx, t, sys, map[string]string{"__init__.py": "# package\n"})
	srv := httptest.NewServer(page.Handler(api.Handler(o, api.Config{
		Routes: map[string]http.Handler{"POST /v1/agui": agui.Handler(o, agui.Config{})}})))
	t.Cleanup(srv.Close)

	br := browsertest.Start(t, 60*time.Second)
	assistants := func(n int) chromedp.Action[chromedp.Void] {
		return until(`document.querySelectorAll('.msg-assistant .bubble:not(.streaming)').length === ` + strconv.Itoa(n) +
			` && document.querySelector('#status').dataset.state === 'idle'`)
	}
	card := func(call string) string { return `article.approval[data-call="` + call + `"]` }
	var thread string
	br.Run("the seed's conversation, decided in the page",
		chromedp.Navigate(srv.URL+page.Path),
		chromedp.WaitVisible(chromedp.CSS(`body[data-ready="true"]`)),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) (err error) {
			thread, err = chromedp.Text(chromedp.CSS(`#thread`))(ctx, tg)
			return err
		}),
		say("Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`"),
		chromedp.WaitVisible(chromedp.CSS(card("delete_file"))),
		chromedp.WaitVisible(chromedp.CSS(card("update_file_dotenv"))),
		chromedp.SendKeys(chromedp.CSS(card("delete_file")+` input[data-role="message"]`), "Deleting files is not allowed"),
		chromedp.Click(chromedp.CSS(card("delete_file")+` button[data-action="deny"]`)),
		chromedp.Click(chromedp.CSS(card("update_file_dotenv")+` button[data-action="edit"]`)),
		chromedp.SetValue(chromedp.CSS(card("update_file_dotenv")+` textarea[data-role="args"]`), `{"path": ".env", "content": "EDITED=1"}`),
		chromedp.Click(chromedp.CSS(card("update_file_dotenv")+` button[data-action="approve-edited"]`)),
		assistants(1),
		until(`document.querySelector('.msg-assistant .bubble').textContent.includes('Cleared .env')`),
		say("What time is it for me?"),
		assistants(2),
		say("Anything else?"),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-dialog`)),
		chromedp.Click(chromedp.CSS(`#confirm-no`)),
		assistants(3),
	)
	for name, want := range map[string]string{"__init__.py": "# package\n", "README.md": "Hello, world!", ".env": "EDITED=1"} {
		if got, err := os.ReadFile(filepath.Join(box, name)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	c, err := o.Conversation(ctx, agui.ConversationID(thread))
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]json.RawMessage{}
	for _, m := range c.History {
		for _, p := range m.Parts {
			if p.Kind == agent.PartToolReturn {
				values[p.ToolCallID] = p.Value
			}
		}
	}
	var tm struct {
		TimeZone string `json:"time_zone"`
	}
	if err := json.Unmarshal(values["local_time"], &tm); err != nil || tm.TimeZone == "" {
		t.Errorf("local_time value %s (%v), want the browser's time zone", values["local_time"], err)
	}
	if v := string(values["confirm"]); v != `{"confirmed":false}` {
		t.Errorf("confirm value %s, want {\"confirmed\":false}", v)
	}
	if c.Status != conversation.StatusCompleted {
		t.Errorf("conversation %s: %s", c.ID, c.Status)
	}
}
