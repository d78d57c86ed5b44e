package e2e_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/browsertest"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/wire"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/worker"
)

// ibAgent is the agent of the inbox test: delete_file always waits for a
// decision, update_file only when it writes .env (the CEL rule).
const ibAgent = `model:
  provider: script
  name: inbox-browser
  script: script.yaml
instructions: You manage files in a sandbox.
tools:
  - name: update_file
    description: Write content to a file in the sandbox.
    parameters:
      type: object
      properties:
        path: {type: string}
        content: {type: string}
      required: [path, content]
      additionalProperties: false
    approval: args.path == ".env"
    approval_metadata: {reason: protected file}
  - name: delete_file
    description: Delete a file in the sandbox.
    parameters:
      type: object
      properties:
        path: {type: string}
      required: [path]
      additionalProperties: false
    approval: always
    approval_metadata: {reason: deleting needs a human}
`

// ibScript: response n answers a history holding n model responses, so
// the summary comes once the results are in.
const ibScript = `- calls:
    - {tool: delete_file, id: del_old, args: {path: old.txt}}
    - {tool: update_file, id: upd_env, args: {path: .env, content: "SECRET=1"}}
- text: Left old.txt alone and wrote .env.
`

const (
	ibDeleteCall = "del_old"
	ibUpdateCall = "upd_env"
	ibApprover   = "carol"
	ibDenyMsg    = "Not today"
)

// TestInboxBrowserEndToEnd is issue 6's browser test against the real
// system, all in this process on one JetStream server: the orchestrator
// (script model, HTTP API), a tool-worker with the built-in tools, and the
// approval inbox reading the orchestrator's API. In headless Chromium the
// two approval requests of a run appear without a reload; delete_file is
// denied with a message, update_file approved with edited args; the
// conversation completes with the denial in the model's history and the
// edited args written by the worker (D23, D24, D26, D36).
func TestInboxBrowserEndToEnd(t *testing.T) {
	log, natsLog := ibLoggers(t)

	// One embedded JetStream server; each party has its own connection.
	sys := testkit.Test(t, testkit.Options{Logger: natsLog})
	conn := func(name string) *bus.Bus {
		t.Helper()
		return bustest.ConnectConfig(t, sys.Server, bus.ConnConfig{Name: name, Logger: log})
	}
	testBus := conn("test")

	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	agentCfg, err := agentconfig.Parse([]byte(ibAgent), fstest.MapFS{"script.yaml": {Data: []byte(ibScript)}})
	if err != nil {
		t.Fatalf("agent config: %v", err)
	}
	// Only carol's signed decisions count: a decision the inbox sent
	// unsigned, or signed with another key, would be refused and the
	// conversation would never complete.
	o := startOrch(t, sys, orchestrator.Config{
		Bus: conn("orchestrator"), Agent: agentCfg, Logger: log.With("component", "orchestrator"),
		TrustedApprovers: map[string]ed25519.PublicKey{ibApprover: pub},
	})
	api := httptest.NewServer(api.Handler(o, api.Config{Logger: log}))
	t.Cleanup(api.Close)
	cl := &client.Client{BaseURL: api.URL, HTTP: &http.Client{Timeout: 10 * time.Second}}

	sandbox := filepath.Join(t.TempDir(), "sandbox")
	tools, err := testkit.BuiltinTools(sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sandbox, "old.txt"), []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := sys.Worker(bustest.Context(t), "worker", worker.Config{Bus: conn("worker"), Tools: tools, ID: "worker-1",
		Logger: log.With("component", "worker"), DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, "worker", w.Stop)

	in, err := inbox.New(inbox.Config{
		Bus: conn("inbox"), ID: ibApprover, Key: key,
		Orchestrator: &client.Client{BaseURL: api.URL},
		PollInterval: time.Second,
		Logger:       log.With("component", "inbox"),
	})
	if err != nil {
		t.Fatal(err)
	}
	bustest.Run(t, "inbox", in.Run)
	bustest.Poll(t, 20*time.Second, "the inbox to take requests", func() (bool, string) { return in.Ready(), "not ready" })
	page := httptest.NewServer(in.Handler())
	t.Cleanup(page.Close)

	// The browser. Everything it does is bounded by bctx; it is closed
	// before the cleanups, so that no page stream holds a server open.
	var convID string
	br := browsertest.Start(t, 50*time.Second)
	bctx, shot, run := br.Ctx, br.Shot, br.Run
	br.OnFailure = func() { ibLogConversation(t, cl, convID) }
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	card := func(call string) string { return `article.card[data-call="` + call + `"]` }

	run("open the empty inbox",
		chromedp.Navigate(page.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#live[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#empty`)),
		// A mark that a reload would wipe: the requests must come over
		// the page's event stream, not a new page.
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`window.ibMark = true`)(ctx, tg)
			return err
		}),
		shot("01-empty-inbox"),
	)

	rs, err := cl.StartRun(bustest.Context(t), "Delete old.txt and set SECRET=1 in .env", "")
	if err != nil {
		t.Fatalf("start run: %v", err)
	}
	convID = rs.ConversationID
	t.Logf("conversation %s, first run %s", convID, rs.RunID)

	run("see both approvals appear without a reload",
		chromedp.WaitVisible(chromedp.CSS(card(ibDeleteCall))),
		chromedp.WaitVisible(chromedp.CSS(card(ibUpdateCall))),
		chromedp.WaitNotVisible(chromedp.CSS(`#empty`)),
		shot("02-two-pending"),
	)
	if mark, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`window.ibMark === true`)); err != nil || !mark {
		t.Errorf("the page was reloaded before the requests showed (mark %v, %v)", mark, err)
	}
	if n := text(`#count`); n != "2" {
		t.Errorf("count shows %q, want 2", n)
	}
	if s := text(card(ibUpdateCall) + ` [data-field="args_text"]`); !strings.Contains(s, `"SECRET=1"`) || !strings.Contains(s, `".env"`) {
		t.Errorf("update_file card shows args %q, want the model's .env args", s)
	}
	if s := text(card(ibUpdateCall) + ` [data-field="reason"]`); s != "protected file" {
		t.Errorf("update_file card shows reason %q, want the tool's approval_metadata reason", s)
	}
	if s := text(card(ibDeleteCall) + ` [data-field="conversation_id"]`); s != convID {
		t.Errorf("delete_file card names conversation %q, want %s", s, convID)
	}

	run("deny delete_file with a message",
		chromedp.SendKeys(chromedp.CSS(card(ibDeleteCall)+` input[data-role="message"]`), ibDenyMsg),
		chromedp.Click(chromedp.CSS(card(ibDeleteCall)+` button[data-action="deny"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card(ibDeleteCall))),
		shot("03-denied"),
	)
	if f := text(`#flash`); !strings.Contains(f, "Denied delete_file") || !strings.Contains(f, "signed") {
		t.Errorf("flash after the denial says %q", f)
	}

	editor := card(ibUpdateCall) + ` textarea[data-role="args"]`
	run("approve update_file with edited args",
		chromedp.Click(chromedp.CSS(card(ibUpdateCall)+` button[data-action="edit"]`)),
		chromedp.WaitVisible(chromedp.CSS(editor)),
		chromedp.SetValue(chromedp.CSS(editor), `{"path": ".env", "content": "SECRET=2"}`),
		shot("04-editing"),
		chromedp.Click(chromedp.CSS(card(ibUpdateCall)+` button[data-action="approve-edited"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card(ibUpdateCall))),
		chromedp.WaitVisible(chromedp.CSS(`#empty`)),
		shot("05-all-decided"),
	)
	if f := text(`#flash`); !strings.Contains(f, "Approved update_file") || !strings.Contains(f, "with edited args") {
		t.Errorf("flash after the approval says %q", f)
	}

	// The decisions on the bus: signed by carol's key, the edit as
	// canonical override args.
	deny := ibDecision(t, testBus, rs.RunID, ibDeleteCall)
	if deny.Approved || deny.Message != ibDenyMsg || deny.ApproverID != ibApprover {
		t.Errorf("denial on the bus = %+v", deny)
	}
	appr := ibDecision(t, testBus, rs.RunID, ibUpdateCall)
	if !appr.Approved || string(appr.OverrideArgs) != `{"content":"SECRET=2","path":".env"}` || appr.ApproverID != ibApprover {
		t.Errorf("approval on the bus = %+v (override %s)", appr, appr.OverrideArgs)
	}
	for _, d := range []wire.Decision{deny, appr} {
		if err := approver.Verify(pub, d); err != nil {
			t.Errorf("decision for %s: %v", d.ToolCallID, err)
		}
	}

	var conv *client.Conversation
	bustest.Poll(t, 40*time.Second, "the conversation to complete", func() (bool, string) {
		c, err := cl.Conversation(bustest.Context(t), convID)
		if err != nil {
			return false, err.Error()
		}
		conv = c
		return c.Terminal(), fmt.Sprintf("%s, %d runs, %d pending", c.Status, len(c.Runs), len(c.Pending))
	})
	if conv.Status != "completed" {
		ibLogConversation(t, cl, convID)
		t.Fatalf("conversation %s: %s (%s), want completed", convID, conv.Status, conv.Error)
	}
	var output string
	if err := json.Unmarshal(conv.Output, &output); err != nil || output != "Left old.txt alone and wrote .env." {
		t.Errorf("output = %s (%v), want the script's summary", conv.Output, err)
	}
	// The prompt run, and the follow-up with the denial and the result of
	// the update, which went to the worker with its edited args when they
	// were approved.
	if len(conv.Runs) != 2 {
		t.Errorf("runs = %+v, want 2", conv.Runs)
	}

	calls, rets := ibParts(t, conv)
	if got := rets[ibDeleteCall]; len(got) != 1 || got[0].Outcome != "denied" || !strings.Contains(string(got[0].Content), ibDenyMsg) {
		t.Errorf("delete_file returns = %+v, want one denied with %q", got, ibDenyMsg)
	}
	if got := rets[ibUpdateCall]; len(got) != 1 || got[0].Outcome != "success" {
		t.Errorf("update_file returns = %+v, want one success", got)
	}
	// The history shows the edit the worker got, and what the model asked
	// for.
	if a := calls[ibUpdateCall]; !strings.Contains(string(a.Args), "SECRET=2") || !strings.Contains(string(a.OriginalArgs), "SECRET=1") {
		t.Errorf("update_file call in the history has args %s, original_args %s; want the edited ones and the model's", a.Args, a.OriginalArgs)
	}
	if b, err := os.ReadFile(filepath.Join(sandbox, ".env")); err != nil || string(b) != "SECRET=2" {
		t.Errorf(".env = %q (%v), want the edited content SECRET=2", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(sandbox, "old.txt")); err != nil || string(b) != "keep me" {
		t.Errorf("old.txt = %q (%v), want it untouched after the denial", b, err)
	}
	// GET /v1/conversations/{id} has no field naming who decided; the
	// decision's approver is checked on the bus above and on the inbox's
	// conversation page below.

	convRow := func(call string) string { return `table.calls tr[data-call="` + call + `"]` }
	run("open the conversation in the inbox",
		chromedp.Navigate(page.URL+"/conversations/"+convID),
		chromedp.WaitVisible(chromedp.CSS(convRow(ibDeleteCall))),
		chromedp.WaitVisible(chromedp.CSS(convRow(ibUpdateCall))),
		shot("06-conversation"),
	)
	if s := text(`.conversation h1 .status`); s != "completed" {
		t.Errorf("conversation page shows status %q", s)
	}
	del := text(convRow(ibDeleteCall))
	if !strings.Contains(del, "denied") || !strings.Contains(del, ibDenyMsg) || !strings.Contains(del, ibApprover) {
		t.Errorf("delete_file row = %q, want denied by %s with %q", del, ibApprover, ibDenyMsg)
	}
	// The approved update ran on the worker under the same call id: the
	// row shows how it ended and still names who approved it, and with
	// which args.
	if s := text(convRow(ibUpdateCall) + ` .state`); s != "returned" {
		t.Errorf("update_file row state = %q, want returned", s)
	}
	if upd := text(convRow(ibUpdateCall)); !strings.Contains(upd, ibApprover) || !strings.Contains(upd, `"content":"SECRET=2"`) {
		t.Errorf("update_file row = %q, want it approved by %s with the edited args", upd, ibApprover)
	}
	if s := text(`.transcript .return.outcome-denied`); !strings.Contains(s, "delete_file") || !strings.Contains(s, ibDenyMsg) {
		t.Errorf("denied return bubble = %q", s)
	}
	if s := text(`.transcript .return.outcome-success`); !strings.Contains(s, "update_file") {
		t.Errorf("success return bubble = %q", s)
	}
	if s := text(`.bubble.output`); !strings.Contains(s, "Left old.txt alone") {
		t.Errorf("output shown = %q", s)
	}
}

// ibDecision reads the decision published for one call of run.
func ibDecision(t *testing.T, b *bus.Bus, runID, callID string) wire.Decision {
	t.Helper()
	for _, d := range bustest.Decisions(t, b, runID) {
		if d.ToolCallID == callID {
			return d
		}
	}
	t.Fatalf("no decision for %s/%s", runID, callID)
	return wire.Decision{}
}

type ibReturn struct {
	Tool    string          `json:"tool"`
	ID      string          `json:"id"`
	Content json.RawMessage `json:"content"`
	Outcome string          `json:"outcome"`
}

// ibParts lists a conversation's tool-call args and tool returns by call
// id.
// ibCall is a call part of GET /v1/conversations/{id}.
type ibCall struct {
	ID           string          `json:"id"`
	Args         json.RawMessage `json:"args"`
	OriginalArgs json.RawMessage `json:"original_args"`
}

func ibParts(t *testing.T, conv *client.Conversation) (calls map[string]ibCall, rets map[string][]ibReturn) {
	t.Helper()
	calls, rets = map[string]ibCall{}, map[string][]ibReturn{}
	for _, raw := range conv.Messages {
		var m struct {
			Request []struct {
				Return *ibReturn `json:"return"`
			} `json:"request"`
			Response []struct {
				Call *ibCall `json:"call"`
			} `json:"response"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("message %s: %v", raw, err)
		}
		for _, p := range m.Request {
			if p.Return != nil {
				rets[p.Return.ID] = append(rets[p.Return.ID], *p.Return)
			}
		}
		for _, p := range m.Response {
			if p.Call != nil {
				calls[p.Call.ID] = *p.Call
			}
		}
	}
	return calls, rets
}

// ibLogConversation logs the conversation as the API shows it, for a
// failure's diagnosis.
func ibLogConversation(t *testing.T, cl *client.Client, id string) {
	t.Helper()
	if id == "" {
		return
	}
	var v any
	if err := ibGetJSON(cl.BaseURL+"/v1/conversations/"+id, &v); err != nil {
		t.Logf("conversation %s: %v", id, err)
		return
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	t.Logf("conversation %s:\n%s", id, b)
}

func ibGetJSON(url string, v any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return json.Unmarshal(body, v)
}

// ibLoggers log into the test's log (shown on failure or with -v): the
// parties at info level, the NATS server at warn; TOOLGATE_TEST_LOG=debug
// shows everything.
func ibLoggers(t *testing.T) (parties, nats *slog.Logger) {
	level, natsLevel := slog.LevelInfo, slog.LevelWarn
	if os.Getenv("TOOLGATE_TEST_LOG") == "debug" {
		level, natsLevel = slog.LevelDebug, slog.LevelDebug
	}
	// Created before any party starts, so it outlives them all.
	w := bustest.NewLogWriter(t)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})),
		slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: natsLevel})).With("component", "nats")
}
