package orchestrator_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/mcptest"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
	goworker "github.com/toolgate/toolgate/worker"
)

// discoverAgent is an agent with only discover: entries, played by a
// script.
func discoverAgent(t *testing.T, discover string) *orchestrator.AgentConfig {
	t.Helper()
	cfg, err := agentconfig.Parse([]byte("model: {provider: test}\ndiscover:\n"+discover), nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func scriptModel(t *testing.T, script string) agent.Model {
	t.Helper()
	rs, err := agent.ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	return agent.NewScriptModel("discover", rs)
}

// mcpWorker serves the tools of MCP servers through a worker as tool-worker
// --mcp does: bound to the servers, advertising their tools.
func (e *env) mcpWorker(servers ...worker.MCPConfig) {
	e.t.Helper()
	var tools []worker.Tool
	var ms []*worker.MCPServer
	for _, cfg := range servers {
		cfg.Logger = testLogger(e.t)
		m, err := worker.NewMCPServer(ctxT(e.t), cfg)
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { _ = m.Close() })
		ms = append(ms, m)
		tools = append(tools, m.Tools()...)
	}
	w, err := worker.New(worker.Config{Bus: e.connect("mcp-worker"), Tools: tools, ID: "mcp-worker", Advertise: true,
		Logger: testLogger(e.t), DrainTimeout: 5 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, m := range ms {
		m.Bind(w)
	}
	e.run("mcp-worker", w.Run)
}

// returnOf is the tool return of call id in the history.
func returnOf(c *conversation.State, id string) *agent.Part {
	for _, m := range c.History {
		for i, p := range m.Parts {
			if p.Kind == agent.PartToolReturn && p.ToolCallID == id {
				return &m.Parts[i]
			}
		}
	}
	return nil
}

// An agent with only discover: entries completes a conversation whose calls
// run on real MCP servers through a worker over the bus: an echo, a sum
// held for approval (approved by a policy bot, signed), a long operation
// past its deadline and a call that crashes its server, both of which the
// model reads as failures.
func TestDiscoveredMCPToolsEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	argv, crashEnv := mcptest.CrashServer(t)
	e.mcpWorker(
		worker.MCPConfig{Name: "everything", Command: mcptest.Everything(t), Prefix: "ev_"},
		worker.MCPConfig{Name: "crashy", Command: argv, Env: crashEnv, Prefix: "cr_"},
	)
	pub, priv := newKey(t)
	e.approverBot("bot", "rules:\n  - tool: ev_get-sum\n    action: approve\n", priv)
	cfg := discoverAgent(t, `
  - tools: "ev_get-*"
    approval: always
    approval_metadata: {reason: "adds numbers"}
    deadline: 1m
  - tools: "ev_trigger-long-*"
    deadline: 3s
  - tools: "*"
    approval: never
`)
	model := scriptModel(t, `
- calls:
  - {tool: ev_echo, id: e1, args: {message: hi}}
  - {tool: ev_get-sum, id: s1, args: {a: 2, b: 40}}
  - {tool: ev_trigger-long-running-operation, id: l1, args: {duration: 60, steps: 60}}
  - {tool: cr_crash, id: c1, args: {}}
- text: done
`)
	// The adverts are in the bucket before the orchestrator starts: its
	// first run sees them.
	reader := e.connect("reader")
	for _, name := range []string{"ev_echo", "ev_trigger-long-running-operation", "cr_crash"} {
		bustest.Advertised(t, reader, name)
	}
	sum, err := bus.DecodeToolAdvert(bustest.Advertised(t, reader, "ev_get-sum"))
	if err != nil {
		t.Fatal(err)
	}
	o, _ := e.orch(orchestrator.Config{Agent: cfg, Model: model, TrustedApprovers: map[string]ed25519.PublicKey{"bot": pub}})

	info, err := o.StartRun(ctxT(t), "use the tools", "")
	if err != nil {
		t.Fatal(err)
	}
	// The first batch waits at least for the long operation's deadline.
	c := waitStatus(t, o, info.ConversationID, conversation.StatusPaused, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status == conversation.StatusPaused && c.Batch != nil && c.Batch.RunID == c.Runs[0].RunID {
		pc := pendingCall(t, c, "s1")
		want, err := orchestrator.SchemaDigest(sum.Parameters)
		if err != nil {
			t.Fatal(err)
		}
		if pc.Kind != "approval" || pc.SchemaDigest != want || !strings.Contains(string(pc.Metadata), "adds numbers") {
			t.Errorf("s1 pending as %s, digest %q (want %q), metadata %s", pc.Kind, pc.SchemaDigest, want, pc.Metadata)
		}
		if pc := pendingCall(t, c, "l1"); pc.Deadline.Sub(c.Runs[0].StartedAt) > time.Minute {
			t.Errorf("l1 deadline %v, want about 3s after the run", pc.Deadline)
		}
	}
	c = waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || c.Output != "done" {
		t.Fatalf("conversation %s (%q): %s", c.Status, c.Output, describe(c))
	}
	checks := []struct {
		id      string
		outcome agent.Outcome
		text    string
	}{
		{"e1", agent.OutcomeSuccess, "Echo: hi"},
		{"s1", agent.OutcomeSuccess, "42"},
		{"l1", agent.OutcomeFailed, "timed out"},
		{"c1", agent.OutcomeFailed, "stopped during the call"},
	}
	for _, ck := range checks {
		p := returnOf(c, ck.id)
		if p == nil {
			t.Errorf("%s: no tool return in the history", ck.id)
			continue
		}
		if got := string(p.Value) + p.Content; p.Outcome != ck.outcome || !strings.Contains(got, ck.text) {
			t.Errorf("%s: %s %q, want %s containing %q", ck.id, p.Outcome, got, ck.outcome, ck.text)
		}
	}
	if len(c.Decisions) != 1 || c.Decisions[0].ToolCallID != "s1" || !c.Decisions[0].Approved || c.Decisions[0].ApproverID != "bot" {
		t.Errorf("decisions = %+v, want s1 approved by bot", c.Decisions)
	}
}

// A tool served by the public Go worker package is discovered as
// tool-worker's are: offered with its advertised schema (args that do not
// fit it go back to the model as a retry, without reaching the worker), and
// a call runs on the Go handler, whose result the model reads.
func TestDiscoveredGoWorkerTool(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The user's own connection, as a Go program would open it.
	nc, err := nats.Connect("", nats.InProcessServer(e.srv().NATSServer()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	w, err := goworker.New(nc, goworker.Config{ID: "go-worker", Logger: testLogger(t), DrainTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var handled atomic.Int32
	err = goworker.Register(w, "get_weather", "Current weather of a city",
		func(_ context.Context, _ goworker.Call, a struct {
			City string `json:"city"`
		}) (string, error) {
			handled.Add(1)
			return "sunny in " + a.City, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	e.run("go-worker", w.Run)
	var advert bus.ToolAdvert
	if err := json.Unmarshal(bustest.Advertised(t, e.connect("reader"), "get_weather"), &advert); err != nil {
		t.Fatal(err)
	}
	if advert.Executor != "go" {
		t.Errorf("executor %q, want go", advert.Executor)
	}
	cfg := discoverAgent(t, "  - tools: \"get_*\"\n")
	model := scriptModel(t, `
- calls: [{tool: get_weather, id: w0, args: {town: Paris}}]
- calls: [{tool: get_weather, id: w1, args: {city: Paris}}]
- text: done
`)
	o, _ := e.orch(orchestrator.Config{Agent: cfg, Model: model})
	if _, ok := o.Catalogue().Lookup("get_weather"); !ok {
		t.Fatal("the Go worker's tool is not in the catalogue")
	}
	info, err := o.StartRun(ctxT(t), "weather in Paris", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || c.Output != "done" {
		t.Fatalf("conversation %s (%q): %s", c.Status, c.Output, describe(c))
	}
	var retry *agent.Part
	for _, m := range c.History {
		for i, p := range m.Parts {
			if p.Kind == agent.PartRetryPrompt && p.ToolCallID == "w0" {
				retry = &m.Parts[i]
			}
		}
	}
	if retry == nil || strings.Contains(retry.Content, "Unknown tool") {
		t.Errorf("w0 (args off the schema) answered %+v, want a retry about its args: %s", retry, describe(c))
	}
	if p := returnOf(c, "w1"); p == nil || p.Outcome != agent.OutcomeSuccess || !strings.Contains(string(p.Value), "sunny in Paris") {
		t.Errorf("w1 return = %+v, want success with \"sunny in Paris\": %s", p, describe(c))
	}
	if n := handled.Load(); n != 1 {
		t.Errorf("handler ran %d times, want once (w1 only)", n)
	}
}

// A call held for approval was made against one version of a discovered
// tool; when the tool's schema changes before the decision comes, the
// approved call is not run: the model reads that the tool changed.
func TestDiscoveredToolChangedBeforeApproval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv, err := e.connect("advertiser").Tools(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	advertise := func(params string) string {
		a := bus.ToolAdvert{Name: "pay", Description: "Pays", Parameters: json.RawMessage(params), Kind: "call", Executor: "custom", WorkerID: "w1", At: time.Now().UTC()}
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctxT(t), "pay", b); err != nil {
			t.Fatal(err)
		}
		d, err := orchestrator.SchemaDigest(a.Parameters)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := advertise(`{"type":"object","properties":{"cents":{"type":"integer"}}}`)
	cfg := discoverAgent(t, "  - tools: pay\n    approval: always\n")
	model := scriptModel(t, "- calls: [{tool: pay, id: p1, args: {cents: 100}}]\n- text: done\n")
	o, _ := e.orch(orchestrator.Config{Agent: cfg, Model: model})
	info, err := o.StartRun(ctxT(t), "pay", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusPaused)
	if pc := pendingCall(t, c, "p1"); pc.SchemaDigest != first {
		t.Fatalf("p1 digest %q, want %q", pc.SchemaDigest, first)
	}
	// Now in euros: an approval of "100" must not pay 100 euros.
	second := advertise(`{"type":"object","properties":{"cents":{"type":"integer","description":"in euros now"}}}`)
	bustest.WaitFor(t, "the changed advert", func() bool {
		a, ok := o.Catalogue().Lookup("pay")
		return ok && a.Digest == second
	})
	e.approverBot("bot", "rules:\n  - action: approve\n", nil)
	c = waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted {
		t.Fatalf("conversation %s: %s", c.Status, describe(c))
	}
	p := returnOf(c, "p1")
	if p == nil || p.Outcome != agent.OutcomeDenied || !strings.Contains(string(p.Value)+p.Content, orchestrator.ToolChangedMessage("pay")) {
		t.Fatalf("p1 return = %+v, want denied with %q", p, orchestrator.ToolChangedMessage("pay"))
	}
	if n := bustest.StreamMsgs(t, e.connect("calls"), wire.StreamCalls); n != 0 {
		t.Errorf("%d calls published, want none", n)
	}
}

// lines is a logger's output, safe to read while it is written.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// A configured tool no worker advertises is warned about once; an advert
// that shares its name with an in-process tool does not shadow it (the run
// would otherwise have the name twice).
func TestDiscoveryBesideConfiguredAndInProcessTools(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv, err := e.connect("advertiser").Tools(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(bus.ToolAdvert{Name: "local", Kind: "call", Executor: "exec", WorkerID: "w1", At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctxT(t), "local", data); err != nil {
		t.Fatal(err)
	}
	local, err := agent.NewRawTool(agent.ToolDef{Name: "local", Parameters: json.RawMessage(`{"type":"object"}`)}, func(*agent.RunContext, json.RawMessage) (any, error) { return "in process", nil })
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := agentconfig.Parse([]byte("model: {provider: test}\ntools:\n  - name: listed\ndiscover:\n  - tools: \"*\"\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var log lines
	o, _ := e.orch(orchestrator.Config{Agent: cfg, Tools: []agent.Tool{local}, Logger: slog.New(slog.NewTextHandler(&log, nil)), AdvertGrace: time.Millisecond,
		Model: scriptModel(t, "- calls: [{tool: local, id: l1}]\n- text: done\n")})
	info, err := o.StartRun(ctxT(t), "go", "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if p := returnOf(c, "l1"); c.Status != conversation.StatusCompleted || p == nil || !strings.Contains(string(p.Value), "in process") {
		t.Fatalf("conversation %s, l1 = %+v: %s", c.Status, p, describe(c))
	}
	// Warned about after the start-up grace.
	bustest.Poll(t, 10*time.Second, "the warning about listed", func() (bool, string) {
		n, m := log.count("no worker has advertised tool"), log.count("tool=listed use=configured")
		return n == 1 && m == 1, fmt.Sprintf("%d warnings, %d about listed", n, m)
	})
}
