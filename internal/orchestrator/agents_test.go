package orchestrator_test

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// namedAgent is the external seed agent named name, whose model answers
// "<name> says 42" after the call: the output tells which agent ran the
// follow-up. extra is appended to its instructions (a changed config).
func namedAgent(t *testing.T, name, extra string) (*orchestrator.AgentConfig, orchestrator.Config) {
	t.Helper()
	cfg := externalAgent(t, "")
	cfg.Name = name
	cfg.Instructions += extra
	script := fmt.Sprintf(`
- calls:
    - tool: calculate_answer
      id: call_1
      args: {question: "the ultimate question"}
- text: %s says 42
`, name)
	return cfg, orchestrator.Config{Agent: cfg, Model: scriptModel(t, script)}
}

// runStarts are the run_started events of a conversation, as "agent@replica".
func runStarts(t *testing.T, b *bus.Bus, convID string, n int) []string {
	t.Helper()
	evs := collectEvents(t, b, convID, func(evs []wire.Event) bool {
		k := 0
		for _, ev := range evs {
			if ev.Type == orchestrator.EventRunStarted {
				k++
			}
		}
		return k >= n
	})
	var out []string
	for _, ev := range evs {
		if ev.Type == orchestrator.EventRunStarted {
			d := eventData(t, ev)
			out = append(out, fmt.Sprintf("%v@%v", d["agent"], d["replica"]))
		}
	}
	return out
}

// Two orchestrators with different agents on one server: each runs only
// the conversations of its own agent. Orchestrator A consumes no replies,
// so every reply, its agent's too, is applied by B, which must hand A's
// follow-ups over (claimed with an expired lease, and a nudge A acts on at
// once: neither reconciles during the test); a start B takes for A's agent
// is handed over the same way.
func TestTwoAgentsOnOneServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alpha, ca := namedAgent(t, "alpha", "")
	beta, cb := namedAgent(t, "beta", "")
	ca.InstanceID, ca.ReconcileInterval = "A", 1<<40
	cb.InstanceID, cb.ReconcileInterval = "B", 1<<40
	a, _ := e.orch(ca)
	b, _ := e.orch(cb)
	if err := a.StopReplies(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	want := map[string]string{} // conversation → agent
	start := func(o *orchestrator.Orchestrator, agentName string) {
		info, err := o.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: "What is the answer?", Agent: agentName})
		if err != nil {
			t.Fatalf("start %s: %v", agentName, err)
		}
		want[info.ConversationID] = agentName
	}
	for range 3 {
		start(a, "alpha")
		start(b, "beta")
	}
	start(b, "alpha") // B does not run alpha: handed to A
	// An agent nobody runs, and none named where there are two.
	_, err := b.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: "x", Agent: "gamma"})
	var ua *orchestrator.UnknownAgentError
	if !errors.As(err, &ua) || !slices.Equal(ua.Choices, []string{"alpha", "beta"}) {
		t.Errorf("start of an unknown agent: %v, want an UnknownAgentError naming alpha and beta", err)
	}
	if _, err := b.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: "x"}); !errors.As(err, &ua) {
		t.Errorf("start naming no agent where there are two: %v, want an UnknownAgentError", err)
	}
	e.worker("calculate_answer")

	events := e.connect("events")
	replica := map[string]string{"alpha": "A", "beta": "B"}
	digest := map[string]string{"alpha": orchestrator.AgentDigest(alpha), "beta": orchestrator.AgentDigest(beta)}
	for id, ag := range want {
		c := waitStatus(t, b, id, conversation.StatusCompleted, conversation.StatusFailed)
		if c.Status != conversation.StatusCompleted {
			t.Fatalf("%s (%s): %s", id, ag, c.Error)
		}
		if c.Output != ag+" says 42" {
			t.Errorf("%s of %s answered %q: run with the wrong agent", id, ag, c.Output)
		}
		if c.Agent != ag || c.AgentDigest != digest[ag] {
			t.Errorf("%s records agent %s digest %s, want %s %s", id, c.Agent, c.AgentDigest, ag, digest[ag])
		}
		starts := runStarts(t, events, id, 2)
		for _, s := range starts {
			if s != ag+"@"+replica[ag] {
				t.Errorf("%s of %s: a run started as %s, want %s@%s (runs %v)", id, ag, s, ag, replica[ag], starts)
			}
		}
	}
	// Every alpha follow-up (3) and the alpha start went over.
	if n := b.Stats().HandedOver.Load(); n < 4 {
		t.Errorf("B handed over %d runs, want at least 4", n)
	}
	if n := a.Stats().RepliesApplied.Load(); n != 0 {
		t.Errorf("A applied %d replies; the test wants B to apply them all", n)
	}
}

// A follow-up of an agent no replica runs is handed over by the replica
// that applied its reply, says so (an agent_unavailable event and
// Unserved in its state) and waits; a replica started with the agent's
// config changed (another digest) adopts it once no replica advertises the
// old digest, and runs it with the new config. Without one it would fail
// after AgentWait (TestAgentWaitFails).
func TestAgentConfigChangedAdoptsStranded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, c1 := namedAgent(t, "alpha", "")
	alpha2, c2 := namedAgent(t, "alpha", " Be brief.")
	_, cb := namedAgent(t, "beta", "")
	c1.InstanceID = "A1"
	c2.InstanceID = "A2"
	// B reads the replicas' adverts every third of its lease TTL: a short
	// one lets it see A1 gone soon.
	cb.InstanceID, cb.ReconcileInterval, cb.LeaseTTL = "B", 50*time.Millisecond, 3*time.Second
	a1, stop1 := e.orch(c1)
	ob, _ := e.orch(cb)
	info, err := a1.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: "What is the answer?"})
	if err != nil {
		t.Fatal(err)
	}
	waitPublished(t, a1, info.ConversationID, 1)
	stop1()
	e.worker("calculate_answer")

	b := e.connect("events")
	evs := collectEvents(t, b, info.ConversationID, hasEvent(orchestrator.EventAgentUnavailable, ""))
	ev, _ := event(evs, orchestrator.EventAgentUnavailable, "")
	if d := eventData(t, ev); d["agent"] != "alpha" || !strings.Contains(fmt.Sprint(d["reason"]), `no replica runs agent "alpha"`) {
		t.Errorf("agent_unavailable data %v", d)
	}
	srv := httptest.NewServer(api.Handler(ob, api.Config{}))
	t.Cleanup(srv.Close)
	status, view := doJSON(t, "GET", srv.URL+"/v1/conversations/"+info.ConversationID, "", "")
	if u, _ := view["unserved"].(string); status != 200 || !strings.Contains(u, `no replica runs agent "alpha"`) || view["unserved_since"] == nil {
		t.Errorf("GET while no replica runs its agent: %d %v", status, view)
	}

	a2, _ := e.orch(c2)
	c := waitStatus(t, a2, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || c.Output != "alpha says 42" {
		t.Fatalf("status %s (%s), output %q", c.Status, c.Error, c.Output)
	}
	if c.AgentDigest != orchestrator.AgentDigest(alpha2) || c.Unserved != "" {
		t.Errorf("digest %s unserved %q, want the new config's %s and none", c.AgentDigest, c.Unserved, orchestrator.AgentDigest(alpha2))
	}
	if starts := runStarts(t, b, info.ConversationID, 2); !slices.Equal(starts, []string{"alpha@A1", "alpha@A2"}) {
		t.Errorf("runs started %v, want alpha@A1 then alpha@A2", starts)
	}
}

// While a replica with a conversation's config digest lives, one with
// another config of the same agent leaves the conversation to it: the
// reply it applies is handed over.
func TestAgentConfigChangedLeavesLiveDigest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alpha1, c1 := namedAgent(t, "alpha", "")
	_, c2 := namedAgent(t, "alpha", " Be brief.")
	c1.InstanceID, c1.ReconcileInterval = "old", 1<<40
	c2.InstanceID, c2.ReconcileInterval = "new", 1<<40
	old, _ := e.orch(c1)
	nw, _ := e.orch(c2)
	if err := old.StopReplies(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	info, err := old.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	e.worker("calculate_answer")
	c := waitStatus(t, nw, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted || c.AgentDigest != orchestrator.AgentDigest(alpha1) {
		t.Fatalf("status %s (%s), digest %s", c.Status, c.Error, c.AgentDigest)
	}
	if starts := runStarts(t, e.connect("events"), info.ConversationID, 2); !slices.Equal(starts, []string{"alpha@old", "alpha@old"}) {
		t.Errorf("runs started %v, want both on the replica with the conversation's digest", starts)
	}
	if nw.Stats().HandedOver.Load() == 0 {
		t.Error("the replica with the new config handed nothing over")
	}
}

// A conversation whose agent no replica runs fails after AgentWait, with
// the reason.
func TestAgentWaitFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, c1 := namedAgent(t, "alpha", "")
	_, cb := namedAgent(t, "beta", "")
	c1.InstanceID = "A"
	cb.InstanceID, cb.ReconcileInterval, cb.AgentWait, cb.LeaseTTL = "B", 50*time.Millisecond, 200*time.Millisecond, 3*time.Second
	a, stop := e.orch(c1)
	_, _ = e.orch(cb)
	info, err := a.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	waitPublished(t, a, info.ConversationID, 1)
	stop()
	e.worker("calculate_answer")
	c := waitStatus(t, a, info.ConversationID, conversation.StatusFailed, conversation.StatusCompleted)
	if c.Status != conversation.StatusFailed || !strings.Contains(c.Error, `no replica runs agent "alpha"`) {
		t.Fatalf("status %s, error %q", c.Status, c.Error)
	}
}

// Several agents in one orchestrator: each conversation runs with its own,
// a follow-up prompt keeps it and may not name another, and two agents of
// one name are refused.
func TestSeveralAgentsInOneOrchestrator(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alpha, _ := namedAgent(t, "alpha", "")
	beta, _ := namedAgent(t, "beta", "")
	e.worker("calculate_answer")
	o, _ := e.orch(orchestrator.Config{Agents: []*orchestrator.AgentConfig{alpha, beta}})
	if got := o.Agents(); !slices.Equal(got, []string{"alpha", "beta"}) {
		t.Errorf("agents %v", got)
	}
	for _, name := range []string{"alpha", "beta"} {
		info, err := o.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: "What is the answer?", Agent: name})
		if err != nil {
			t.Fatal(err)
		}
		c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
		if c.Status != conversation.StatusCompleted || c.Agent != name {
			t.Fatalf("%s: status %s (%s) agent %s", name, c.Status, c.Error, c.Agent)
		}
		other := map[string]string{"alpha": "beta", "beta": "alpha"}[name]
		_, err = o.StartRunWith(ctxT(t), orchestrator.StartRequest{Prompt: "again", ConversationID: c.ID, Agent: other})
		var me *orchestrator.AgentMismatchError
		if !errors.As(err, &me) {
			t.Errorf("a prompt naming another agent: %v, want an AgentMismatchError", err)
		}
	}
	dup := *beta
	dup.Name = "alpha"
	if _, err := orchestrator.New(orchestrator.Config{Bus: e.connect("dup"), Agents: []*orchestrator.AgentConfig{alpha, &dup}}); err == nil || !strings.Contains(err.Error(), `two agents are named "alpha"`) {
		t.Errorf("two agents of one name: %v", err)
	}
}

// The digest is of what changes behaviour, in a canonical form: key order
// and YAML or JSON do not change it, the name and the key's variable do
// not, the instructions and a tool's approval rule do.
func TestAgentDigest(t *testing.T) {
	yamlCfg := "name: a\nmodel: {provider: test, api_key_env: K1}\ntools:\n  - name: t\n    parameters: {type: object, properties: {x: {type: string}}}\n"
	jsonCfg := `{"tools":[{"parameters":{"properties":{"x":{"type":"string"}},"type":"object"},"name":"t"}],"model":{"api_key_env":"K2","provider":"test"},"name":"b"}`
	y, err := agentconfig.Parse([]byte(yamlCfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	j, err := agentconfig.Parse([]byte(jsonCfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	if orchestrator.AgentDigest(y) != orchestrator.AgentDigest(j) {
		t.Error("the same config in YAML and JSON has two digests")
	}
	changed := *y
	changed.Instructions = "be brief"
	if orchestrator.AgentDigest(&changed) == orchestrator.AgentDigest(y) {
		t.Error("changed instructions kept the digest")
	}
	tools := slices.Clone(y.Tools)
	tools[0].Approval = "always"
	changed = *y
	changed.Tools = tools
	if orchestrator.AgentDigest(&changed) == orchestrator.AgentDigest(y) {
		t.Error("a changed approval rule kept the digest")
	}
}

// --agent takes files and directories: each *.yaml, *.yml and *.json of a
// directory is an agent, named by name: or its file's base name; two of
// one name are refused with both files named.
func TestLoadAgentConfigs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const tools = "tools:\n  - name: t\n"
	write("agents/support.yaml", "model: {provider: test}\n"+tools)
	write("agents/billing.yml", "name: money\nmodel: {provider: test}\n"+tools)
	write("agents/ops.json", `{"model":{"provider":"test"},"tools":[{"name":"t"}]}`)
	write("agents/README.md", "not an agent")
	single := write("one/extra.yaml", "model: {provider: test}\n"+tools)
	cfgs, files, err := agentconfig.LoadAll([]string{filepath.Join(dir, "agents"), single})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cfgs {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"money", "ops", "support", "extra"}) || len(files) != 4 {
		t.Errorf("agents %v from %v", names, files)
	}

	dup := write("dup/money.yaml", "model: {provider: test}\n"+tools)
	_, _, err = agentconfig.LoadAll([]string{filepath.Join(dir, "agents"), dup})
	if err == nil || !strings.Contains(err.Error(), "billing.yml") || !strings.Contains(err.Error(), "dup/money.yaml") || !strings.Contains(err.Error(), `"money"`) {
		t.Errorf("two agents named money: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := agentconfig.LoadAll([]string{empty}); err == nil || !strings.Contains(err.Error(), "holds no") {
		t.Errorf("an empty directory: %v", err)
	}
	bad := write("bad/x.yaml", "name: no spaces allowed\nmodel: {provider: test}\n"+tools)
	if _, _, err := agentconfig.LoadAll([]string{bad}); err == nil || !strings.Contains(err.Error(), "no spaces allowed") {
		t.Errorf("a name that is no subject token: %v", err)
	}
}

// POST /v1/runs with several agents: none named → 400 naming the choices,
// an unknown one → 400, a follow-up naming another agent than its
// conversation's → 409; GET and the list show the agent, the client and
// its start name one.
func TestHTTPAgents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alpha, _ := namedAgent(t, "alpha", "")
	beta, _ := namedAgent(t, "beta", "")
	e.worker("calculate_answer")
	o, _ := e.orch(orchestrator.Config{Agents: []*orchestrator.AgentConfig{alpha, beta}})
	srv := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(srv.Close)

	status, body := doJSON(t, "POST", srv.URL+"/v1/runs", "", `{"prompt":"hi"}`)
	if msg, _ := body["error"].(string); status != 400 || !strings.Contains(msg, "agent: required, there are several (alpha, beta)") {
		t.Errorf("no agent: %d %v", status, body)
	}
	status, body = doJSON(t, "POST", srv.URL+"/v1/runs", "", `{"prompt":"hi","agent":"gamma"}`)
	if msg, _ := body["error"].(string); status != 400 || !strings.Contains(msg, `no replica runs an agent named "gamma" (agents: alpha, beta)`) {
		t.Errorf("unknown agent: %d %v", status, body)
	}

	c := &client.Client{BaseURL: srv.URL}
	rs, err := c.Start(ctxT(t), client.StartOptions{Prompt: "What is the answer?", Agent: "beta"})
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, o, rs.ConversationID, conversation.StatusCompleted)
	conv, err := c.Conversation(ctxT(t), rs.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	if conv.Agent != "beta" || conv.AgentDigest != orchestrator.AgentDigest(beta) || conv.Unserved != "" {
		t.Errorf("GET: agent %q digest %q unserved %q", conv.Agent, conv.AgentDigest, conv.Unserved)
	}
	status, body = doJSON(t, "POST", srv.URL+"/v1/runs", "", `{"prompt":"again","agent":"alpha","conversation_id":"`+rs.ConversationID+`"}`)
	if msg, _ := body["error"].(string); status != 409 || !strings.Contains(msg, `runs with agent "beta", not "alpha"`) {
		t.Errorf("follow-up naming another agent: %d %v", status, body)
	}
	page, err := c.List(ctxT(t), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Conversations) != 1 || page.Conversations[0].Agent != "beta" {
		t.Errorf("list: %+v", page.Conversations)
	}
}
