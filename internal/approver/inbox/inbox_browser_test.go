package inbox_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/browsertest"
	"github.com/toolgate/toolgate/wire"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

// TestBrowserInbox drives the inbox page in headless Chromium: requests
// appear without a reload, one is denied with a message, one approved with
// edited args (after the schema refused a first edit), one leaves when the
// events say it was settled elsewhere; the decisions on the bus are
// checked. `make test` installs chromium (scripts/ensure-chromium.sh); a
// missing browser fails the test, it never skips.
func TestBrowserInbox(t *testing.T) {

	b := bustest.NewBus(t)
	key := newKey(t)
	in, _ := startInbox(t, inbox.Config{Bus: b, ID: "carol", Key: key})
	srv := httptest.NewServer(in.Handler())
	t.Cleanup(srv.Close)

	br := browsertest.Start(t, 50*time.Second)
	shot, run := br.Shot, br.Run
	text := func(sel string, into *string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			v, err := chromedp.Text(chromedp.CSS(sel))(ctx, tg)
			*into = v
			return err
		})
	}
	card := func(key string) string { return `article.card[data-key="` + key + `"]` }

	run("open the inbox",
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#empty`)),
		shot("01-empty"),
	)

	dl := time.Now().Add(10 * time.Minute)
	deny := request(t, "run-1", "call-1", `{"path":"secrets.env"}`, dl)
	edit := request(t, "run-2", "call-7", `{"path":"build/"}`, dl)
	gone := request(t, "run-3", "call-2", `{"path":"tmp.log"}`, dl)
	publish(t, b, deny, edit, gone)

	var count string
	run("see the requests arrive without a reload",
		chromedp.WaitVisible(chromedp.CSS(card("run-1/call-1"))),
		chromedp.WaitVisible(chromedp.CSS(card("run-2/call-7"))),
		chromedp.WaitVisible(chromedp.CSS(card("run-3/call-2"))),
		chromedp.WaitNotVisible(chromedp.CSS(`#empty`)),
		text(`#count`, &count),
		shot("02-pending"),
	)
	if count != "3" {
		t.Errorf("count shows %q, want 3", count)
	}

	run("deny one with a message",
		chromedp.SendKeys(chromedp.CSS(card("run-1/call-1")+` input[data-role="message"]`), "secrets stay where they are"),
		chromedp.Click(chromedp.CSS(card("run-1/call-1")+` button[data-action="deny"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card("run-1/call-1"))),
	)
	d := waitDecision(t, b, "run-1")
	if d.Approved || d.Message != "secrets stay where they are" || d.ApproverID != "carol" || d.ArgsDigest != deny.ArgsDigest {
		t.Errorf("denial = %+v", d)
	}
	if err := approver.Verify(key.Public().(ed25519.PublicKey), d); err != nil {
		t.Error(err)
	}

	var errText string
	editor := card("run-2/call-7") + ` textarea[data-role="args"]`
	errors := card("run-2/call-7") + ` ul[data-role="errors"]`
	run("an edit that is not JSON is caught in the page",
		chromedp.Click(chromedp.CSS(card("run-2/call-7")+` button[data-action="edit"]`)),
		chromedp.WaitVisible(chromedp.CSS(editor)),
		chromedp.SetValue(chromedp.CSS(editor), `{"path": `),
		chromedp.Click(chromedp.CSS(card("run-2/call-7")+` button[data-action="approve-edited"]`)),
		chromedp.WaitVisible(chromedp.CSS(errors)),
		text(errors, &errText),
	)
	if !strings.Contains(errText, "Not valid JSON") {
		t.Errorf("client-side check said %q", errText)
	}
	run("an edit the schema refuses is shown inline",
		chromedp.SetValue(chromedp.CSS(editor), "{\n  \"path\": 42,\n  \"recursive\": true\n}"),
		chromedp.Click(chromedp.CSS(card("run-2/call-7")+` button[data-action="approve-edited"]`)),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[chromedp.Void](`document.querySelector('`+errors+`').textContent.includes("at '/path'")`,
				chromedp.WithPollingTimeout(10*time.Second))(ctx, tg)
			return err
		}),
		text(errors, &errText),
		shot("03-schema-refused"),
	)
	if !strings.Contains(errText, "additional properties 'recursive' not allowed") {
		t.Errorf("schema errors shown: %q", errText)
	}
	if d := bustest.LastDecision(t, b, "run-2"); d != nil {
		t.Fatalf("a refused edit was published: %+v", d)
	}

	run("approve with edited args",
		chromedp.SetValue(chromedp.CSS(editor), "{\n  \"path\": \"build/cache\",\n  \"force\": true\n}"),
		chromedp.Click(chromedp.CSS(card("run-2/call-7")+` button[data-action="approve-edited"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card("run-2/call-7"))),
		// The card may leave by the event stream before the decision's
		// answer comes, whose flash would then cover the next one's.
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[chromedp.Void](`document.querySelector('#flash').textContent.includes("Approved delete_file (call-7)")`,
				chromedp.WithPollingTimeout(10*time.Second))(ctx, tg)
			return err
		}),
	)
	d = waitDecision(t, b, "run-2")
	if !d.Approved || string(d.OverrideArgs) != `{"force":true,"path":"build/cache"}` || d.ArgsDigest != edit.ArgsDigest {
		t.Errorf("approval = %+v (override %s)", d, d.OverrideArgs)
	}

	publishEvent(t, b, wire.Event{ConversationID: gone.ConversationID, RunID: gone.RunID, ToolCallID: gone.ToolCallID,
		Type: "reply_applied", Data: json.RawMessage(`{"kind":"approval"}`)})
	var flash string
	run("a request settled elsewhere leaves every open page",
		chromedp.WaitNotPresent(chromedp.CSS(card("run-3/call-2"))),
		chromedp.WaitVisible(chromedp.CSS(`#empty`)),
		text(`#flash`, &flash),
		shot("04-all-decided"),
	)
	if !strings.Contains(flash, "settled") {
		t.Errorf("flash says %q, want a note that the request was settled elsewhere", flash)
	}
	if d := bustest.LastDecision(t, b, "run-3"); d != nil {
		t.Errorf("a decision was published for the request settled elsewhere: %+v", d)
	}
}
