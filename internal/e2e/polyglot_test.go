package e2e_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/wire"
)

// The examples in other languages (examples/python, examples/node) each
// answer a real conversation of an orchestrator process with its embedded
// JetStream, as docs/other-languages.md says they would.

// repoRoot is the repository, from this package's directory.
var repoRoot = filepath.Join("..", "..")

// ensurePython and ensureNode install what the examples need (python3; the
// npm packages of examples/node, and python3) once, as make test-deps
// does; a machine where that cannot be done fails the tests: they never
// skip.
var (
	ensurePython = sync.OnceValue(func() error {
		if out, err := exec.Command(filepath.Join(repoRoot, "scripts", "ensure-python.sh")).CombinedOutput(); err != nil {
			return fmt.Errorf("scripts/ensure-python.sh: %v\n%s", err, out)
		}
		return nil
	})
	ensureNode = sync.OnceValues(func() (string, error) {
		for _, tool := range []string{"node", "npm"} {
			if _, err := exec.LookPath(tool); err != nil {
				return "", fmt.Errorf("%s is not on PATH: the Node examples need Node.js and npm (make test-deps)", tool)
			}
		}
		out, err := exec.Command(filepath.Join(repoRoot, "scripts", "ensure-examples.sh")).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("scripts/ensure-examples.sh: %v\n%s", err, out)
		}
		dir := os.Getenv("TOOLGATE_EXAMPLES_NPM_DIR")
		if dir == "" {
			dir = filepath.Join(repoRoot, ".cache", "npm-examples")
		}
		return filepath.Abs(filepath.Join(dir, "node_modules"))
	})
)

// example is the absolute path of a file of examples/.
func example(t *testing.T, path string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(repoRoot, "examples", path))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// polyglotSystem is an orchestrator process with its embedded NATS server
// (with users when users is set), running the agent with the script; extra
// are more flags.
func polyglotSystem(t *testing.T, agentYAML string, script []map[string]any, users string, extra ...string) (s *system, api *client.Client) {
	t.Helper()
	s = newSystem(t, agentYAML, script, false)
	httpAddr := freeAddr(t)
	args := []string{
		"--http", httpAddr, "--agent", s.agentFile, "--log-level", "debug", "--shutdown-timeout", "5s",
		"--store", s.store, "--nats-listen", strings.TrimPrefix(s.natsURL, "nats://"),
	}
	if users != "" {
		path := filepath.Join(s.dir, "users.yaml")
		if err := os.WriteFile(path, []byte(users), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--nats-users", path)
	}
	args = append(args, extra...)
	p := startProc(t, s.dir, "orchestrator", bins.orchestrator, nil, args...)
	api = &client.Client{BaseURL: "http://" + httpAddr, HTTP: httpClient}
	if err := api.WaitHealthy(ctxT(t)); err != nil {
		t.Fatalf("orchestrator: %v\n%s", err, tail(p.log, 30))
	}
	return s, api
}

// waitLine waits until the process's log has a line matching re, and
// returns its submatches.
func waitLine(t *testing.T, p *proc, re *regexp.Regexp) []string {
	t.Helper()
	var m []string
	waitFor(t, fmt.Sprintf("%s to log %q", p.name, re), func() (bool, string) {
		if !p.running() {
			t.Fatalf("%s exited: %v\n%s", p.name, p.err, tail(p.log, 30))
		}
		raw, _ := os.ReadFile(p.log)
		m = re.FindStringSubmatch(string(raw))
		return m != nil, tail(p.log, 5)
	})
	return m
}

// conversationParts are a conversation's request parts by call id: its
// tool returns and retry prompts.
type conversationParts struct {
	returns map[string]toolReturn
	retries map[string]string
}

func partsOf(t *testing.T, conv *client.Conversation) conversationParts {
	t.Helper()
	out := conversationParts{returns: map[string]toolReturn{}, retries: map[string]string{}}
	for _, raw := range conv.Messages {
		var m struct {
			Request []struct {
				Return *toolReturn `json:"return"`
				Retry  *struct {
					ID      string `json:"id"`
					Message string `json:"message"`
				} `json:"retry"`
			} `json:"request"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("message %s: %v", raw, err)
		}
		for _, p := range m.Request {
			if p.Return != nil {
				if _, dup := out.returns[p.Return.ID]; dup {
					t.Errorf("call %s returned twice", p.Return.ID)
				}
				out.returns[p.Return.ID] = *p.Return
			}
			if p.Retry != nil {
				out.retries[p.Retry.ID] = p.Retry.Message
			}
		}
	}
	return out
}

// runToEnd starts a conversation and waits for it to end.
func runToEnd(t *testing.T, api *client.Client) *client.Conversation {
	t.Helper()
	rs, err := api.StartRun(ctxT(t), "go", "")
	if err != nil {
		t.Fatal(err)
	}
	return waitConversations(t, api, []client.RunStatus{rs})[rs.ConversationID]
}

const temperatureParams = `{type: object, properties: {value: {type: number}, from: {type: string}, to: {type: string}}, required: [value, from, to]}`

// The Python tool answers as an --exec program (one process per call,
// the CallRequest on stdin) and as an --http service (http.server), both
// run by the Go tool-worker: a value with content and metadata, and a
// model-retry form the model reads.
func TestPythonExecutors(t *testing.T) {
	t.Parallel()
	if err := ensurePython(); err != nil {
		t.Fatal(err)
	}
	agent := `model: {provider: script, script: script.json}
tools:
  - {name: convert_exec, description: Convert a temperature (Python per call), parameters: ` + temperatureParams + `}
  - {name: convert_http, description: Convert a temperature (Python web service), parameters: ` + temperatureParams + `}
`
	s, api := polyglotSystem(t, agent, scriptOf(
		map[string]any{"calls": []map[string]any{
			{"tool": "convert_exec", "id": "c_exec", "args": map[string]any{"value": 100, "from": "celsius", "to": "fahrenheit"}},
			{"tool": "convert_http", "id": "c_http", "args": map[string]any{"value": 0, "from": "kelvin", "to": "celsius"}},
			{"tool": "convert_exec", "id": "c_retry", "args": map[string]any{"value": 1, "from": "celsius", "to": "rankine"}},
		}},
		answer,
	), "")

	server := startProc(t, s.dir, "python-http", "python3", nil, example(t, "python/http_tool.py"), "--port", "0")
	url := waitLine(t, server, regexp.MustCompile(`listening on (http://\S+)`))[1]
	startProc(t, s.dir, "tool-worker", bins.worker, nil,
		"--nats", s.natsURL, "--id", "py-worker", "--advertise=false", "--log-level", "debug",
		"--exec", "convert_exec=python3 "+example(t, "python/exec_tool.py"),
		"--http", "convert_http="+url)

	conv := runToEnd(t, api)
	if conv.Status != "completed" {
		t.Fatalf("conversation %s (%s), want completed", conv.Status, conv.Error)
	}
	parts := partsOf(t, conv)
	for call, want := range map[string]struct{ content, mode string }{
		"c_exec": {`{"value":212.0,"unit":"fahrenheit"}`, "exec"},
		"c_http": {`{"value":-273.15,"unit":"celsius"}`, "http"},
	} {
		r, ok := parts.returns[call]
		if !ok {
			t.Errorf("%s: no tool return; parts %+v", call, parts)
			continue
		}
		var meta struct {
			Mode           string `json:"mode"`
			IdempotencyKey string `json:"idempotency_key"`
		}
		if err := json.Unmarshal(r.Metadata, &meta); err != nil {
			t.Errorf("%s: metadata %s: %v", call, r.Metadata, err)
		}
		if r.Outcome != "success" || string(r.Content) != want.content || meta.Mode != want.mode || !strings.HasSuffix(meta.IdempotencyKey, ":"+call) {
			t.Errorf("%s: %s %s metadata %s; want success, content %s, mode %s, its idempotency key", call, r.Outcome, r.Content, r.Metadata, want.content, want.mode)
		}
	}
	if msg := parts.retries["c_retry"]; !strings.Contains(msg, "to must be one of celsius, fahrenheit, kelvin") {
		t.Errorf("c_retry: retry prompt %q; parts %+v", msg, parts)
	}
}

// The Node worker serves its tools straight from JetStream and the Node
// bot decides approvals, each under the NATS user of its role: the bot
// approves a small refund, which then runs on the Node worker, and denies
// a large one with a message; it learns both outcomes from the events,
// through the ordered consumer that nats.js creates with a filter list.
// The orchestrator publishes msgpack, or JSON with --wire json: the
// examples read both.
func TestNodeWorkerAndApprovalBot(t *testing.T) {
	t.Parallel()
	modules, err := ensureNode()
	if err != nil {
		t.Fatal(err)
	}
	for _, wireForm := range []string{"msgpack", "json"} {
		t.Run(wireForm, func(t *testing.T) {
			t.Parallel()
			nodeConversation(t, modules, "--wire", wireForm)
		})
	}
}

func nodeConversation(t *testing.T, modules string, flags ...string) {
	agent := `model: {provider: script, script: script.json}
tools:
  - name: lookup_order
    description: Look an order up.
    parameters: {type: object, properties: {order_id: {type: string}}, required: [order_id]}
  - name: refund_order
    description: Refund an order.
    parameters: {type: object, properties: {order_id: {type: string}, amount: {type: number}}, required: [order_id, amount]}
    approval: always
`
	const users = `users:
  - {name: orchestrator, password: orch-pw, role: orchestrator}
  - {name: worker-1, password: worker-pw, role: worker}
  - {name: refund-bot, password: bot-pw, role: approver}
`
	s, api := polyglotSystem(t, agent, scriptOf(
		map[string]any{"calls": []map[string]any{
			{"tool": "lookup_order", "id": "c_lookup", "args": map[string]any{"order_id": "A-1041"}},
			{"tool": "refund_order", "id": "c_small", "args": map[string]any{"order_id": "A-1041", "amount": 20}},
			{"tool": "refund_order", "id": "c_big", "args": map[string]any{"order_id": "A-7", "amount": 500}},
		}},
		answer,
	), users, flags...)
	env := func(user, password string) []string {
		return []string{"NODE_PATH=" + modules, "NATS_URL=" + s.natsURL, "NATS_USER=" + user, "NATS_PASSWORD=" + password}
	}
	worker := startProc(t, s.dir, "node-worker", "node", env("worker-1", "worker-pw"), example(t, "node/worker.js"), "--id", "node-worker")
	bot := startProc(t, s.dir, "node-bot", "node", env("refund-bot", "bot-pw"), example(t, "node/approval-bot.js"), "--max-refund", "100")
	// The bot reads events from the time it starts: wait until it does.
	waitLine(t, bot, regexp.MustCompile(`(?m)^ready: `))

	conv := runToEnd(t, api)
	if conv.Status != "completed" {
		t.Fatalf("conversation %s (%s), want completed", conv.Status, conv.Error)
	}
	parts := partsOf(t, conv)
	var lookup struct {
		OrderID  string `json:"order_id"`
		Status   string `json:"status"`
		ServedBy string `json:"served_by"`
	}
	r := parts.returns["c_lookup"]
	if err := json.Unmarshal(r.Content, &lookup); err != nil || r.Outcome != "success" || lookup.OrderID != "A-1041" || lookup.Status != "shipped" || lookup.ServedBy != "node" {
		t.Errorf("c_lookup: %s %s (%v), want the Node worker's answer", r.Outcome, r.Content, err)
	}
	var refund struct {
		RefundID string  `json:"refund_id"`
		Amount   float64 `json:"amount"`
		ServedBy string  `json:"served_by"`
	}
	r = parts.returns["c_small"]
	if err := json.Unmarshal(r.Content, &refund); err != nil || r.Outcome != "success" || refund.RefundID == "" || refund.Amount != 20 || refund.ServedBy != "node" {
		t.Errorf("c_small: %s %s (%v), want the Node worker's refund of 20", r.Outcome, r.Content, err)
	}
	if r = parts.returns["c_big"]; r.Outcome != "denied" || !strings.Contains(string(r.Content), "refunds above 100 need a person") {
		t.Errorf("c_big: %s %s, want denied with the bot's message", r.Outcome, r.Content)
	}
	// The bot heard from the orchestrator (outcomes) and from the events.
	waitLine(t, bot, regexp.MustCompile(`(?m)^outcome c_small applied`))
	waitLine(t, bot, regexp.MustCompile(`(?m)^event reply_applied c_small approved=true by refund-bot`))
	waitLine(t, bot, regexp.MustCompile(`(?m)^event reply_applied c_big approved=false by refund-bot`))
	waitLine(t, worker, regexp.MustCompile(`(?m)^answered refund_order c_small`))

	// The bot's message ids are those the Go approver would give its
	// decisions: its canonical JSON is the orchestrator's, which a signed
	// decision needs.
	b, err := bus.Connect(ctxT(t), bus.ConnConfig{URL: s.natsURL, Name: "e2e-test", User: "orchestrator", Password: "orch-pw"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, err := b.JetStream().Stream(ctxT(t), wire.StreamReplies)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	decisions := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		raw, err := st.GetMsg(ctxT(t), seq)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(raw.Subject, "."+wire.ReplyKindApproval) {
			continue
		}
		decisions++
		var d wire.Decision
		if err := wire.Decode(raw.Data, raw.Header.Get(wire.HeaderContentType), &d); err != nil {
			t.Fatalf("decision %d: %v", seq, err)
		}
		want, err := d.MsgID()
		if err != nil {
			t.Fatal(err)
		}
		if got := raw.Header.Get("Nats-Msg-Id"); got != want {
			t.Errorf("decision %s: Nats-Msg-Id %s, want %s (body %s)", d.ToolCallID, got, want, raw.Data)
		}
	}
	if decisions != 2 {
		t.Errorf("%d decisions stored, want the bot's 2", decisions)
	}
}
