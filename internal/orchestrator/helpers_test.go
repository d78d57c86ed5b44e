package orchestrator_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/internal/worker"
)

// waitTimeout bounds every wait on a condition; generous for a loaded
// 2-core machine.
const waitTimeout = 30 * time.Second

func testLogger(t *testing.T) *slog.Logger {
	if os.Getenv("TOOLGATE_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
}

// env is a system of the kit (an embedded JetStream server with
// toolgate's streams set up) that tests start their parts on.
type env struct {
	t   *testing.T
	sys *testkit.System
	dir string
	// tp, when set, traces the workers and approvers the env starts.
	tp trace.TracerProvider
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return envWith(t, t.TempDir(), embedded.ServerConfig{})
}

// envWith is newEnv with the server storing in dir, configured by srv
// beyond that (users, store limits).
func envWith(t *testing.T, dir string, srv embedded.ServerConfig) *env {
	t.Helper()
	return &env{t: t, sys: testkit.Test(t, testkit.Options{Dir: dir, Server: srv, Logger: testLogger(t)}), dir: dir}
}

// newEnvListening is newEnv with the server listening on a loopback port
// too, for connections through a proxy.
func newEnvListening(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	return &env{t: t, sys: testkit.Test(t, testkit.Options{Dir: dir, Listen: true, Logger: testLogger(t)}), dir: dir}
}

// srv is the env's server.
func (e *env) srv() *embedded.Server { return e.sys.Server }

// connect opens a connection, closed at cleanup.
func (e *env) connect(name string) *bus.Bus {
	e.t.Helper()
	return bustest.ConnectConfig(e.t, e.srv(), bus.ConnConfig{Name: name, Logger: testLogger(e.t)})
}

// orch starts an orchestrator on its own connection (the demo agent unless
// cfg has one); it is stopped at cleanup (or earlier with the returned
// stop).
func (e *env) orch(cfg orchestrator.Config) (*orchestrator.Orchestrator, func()) {
	e.t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(e.t)
	}
	if cfg.Bus == nil {
		// Open until cleanup: a test reads through a stopped orchestrator.
		cfg.Bus = e.connect("orchestrator")
	}
	o, err := e.sys.Orchestrator(ctxT(e.t), "orchestrator", cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := o.Stop(ctx); err != nil {
			e.t.Errorf("stop orchestrator: %v", err)
		}
	}
	e.t.Cleanup(stop)
	return o.Orchestrator, stop
}

// worker runs the built-in tools in a sandbox; returns the sandbox.
func (e *env) worker(tools ...string) string {
	e.t.Helper()
	sandbox := filepath.Join(e.t.TempDir(), "sandbox")
	ts, err := testkit.BuiltinTools(sandbox, tools...)
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := e.sys.Worker(ctxT(e.t), "worker", worker.Config{Tools: ts, ID: "worker-1", Logger: testLogger(e.t), DrainTimeout: 5 * time.Second, TracerProvider: e.tp})
	if err != nil {
		e.t.Fatal(err)
	}
	e.stopAtCleanup("worker", p)
	return sandbox
}

// approverBot runs a policy approver; key may be nil (unsigned decisions).
func (e *env) approverBot(id, policy string, key ed25519.PrivateKey) {
	e.t.Helper()
	p, err := e.sys.Approver(ctxT(e.t), approver.Config{ID: id, Key: key, Logger: testLogger(e.t), TracerProvider: e.tp}, policy)
	if err != nil {
		e.t.Fatal(err)
	}
	e.stopAtCleanup(id, p)
}

// stopAtCleanup stops p when the test ends, before the connections the
// test opened after it close, and fails the test on its error.
func (e *env) stopAtCleanup(name string, p *testkit.Part) {
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			e.t.Errorf("%s: %v", name, err)
		}
	})
}

// run runs fn until cleanup.
func (e *env) run(name string, fn func(context.Context) error) {
	bustest.Run(e.t, name, fn)
}

// seedPolicy denies deletes and approves the rest (the seed's example).
const seedPolicy = testkit.SeedPolicy

func newKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// waitFor polls cond until it holds or waitTimeout passes.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	bustest.Poll(t, waitTimeout, what, cond)
}

// waitStatus waits for the conversation to reach status and returns it.
func waitStatus(t *testing.T, o *orchestrator.Orchestrator, convID string, want ...conversation.Status) *conversation.State {
	t.Helper()
	var c *conversation.State
	waitFor(t, fmt.Sprintf("conversation %s to be %v", convID, want), func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		var err error
		c, err = o.Conversation(ctx, convID)
		if err != nil {
			return false, err.Error()
		}
		for _, w := range want {
			if c.Status == w {
				return true, ""
			}
		}
		return false, describe(c)
	})
	return c
}

// completeRun starts a new conversation with prompt and waits for it to
// complete; one that fails ends the test.
func completeRun(t *testing.T, o *orchestrator.Orchestrator, prompt string) *conversation.State {
	t.Helper()
	info, err := o.StartRun(ctxT(t), prompt, "")
	if err != nil {
		t.Fatal(err)
	}
	c := waitStatus(t, o, info.ConversationID, conversation.StatusCompleted, conversation.StatusFailed)
	if c.Status != conversation.StatusCompleted {
		t.Fatalf("%s", describe(c))
	}
	return c
}

func describe(c *conversation.State) string {
	var b strings.Builder
	fmt.Fprintf(&b, "status=%s error=%q runs=%d", c.Status, c.Error, len(c.Runs))
	if c.Batch != nil {
		for _, pc := range c.Batch.Calls {
			fmt.Fprintf(&b, " [%s %s published=%v", pc.Kind, pc.ToolCallID, pc.Published)
			if pc.Reply != nil {
				fmt.Fprintf(&b, " reply=%s", pc.Reply.Outcome)
			}
			fmt.Fprintf(&b, " refused=%d dup=%d late=%d %s]", pc.Refused, pc.Duplicates, pc.Late, pc.LastRefusal)
		}
	}
	return b.String()
}

func ctxT(t *testing.T) context.Context { return bustest.Context(t) }

// externalAgent is the seed's external example (examples/), with extra
// YAML appended to its tool (e.g. a short deadline).
func externalAgent(t *testing.T, toolExtra string) *orchestrator.AgentConfig {
	t.Helper()
	script, err := os.ReadFile("../../examples/seed-external-script.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return seedExternal(t, toolExtra, string(script))
}

// scriptedExternalAgent is the seed's external example with its model
// playing script instead.
func scriptedExternalAgent(t *testing.T, script string) *orchestrator.AgentConfig {
	t.Helper()
	return seedExternal(t, "", script)
}

func seedExternal(t *testing.T, toolExtra, script string) *orchestrator.AgentConfig {
	t.Helper()
	data, err := os.ReadFile("../../examples/agent-seed-external.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if toolExtra != "" {
		data = []byte(strings.Replace(string(data), "    deadline: 5m\n", toolExtra, 1))
	}
	cfg, err := agentconfig.Parse(data, fstest.MapFS{"seed-external-script.yaml": {Data: []byte(script)}})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// waitDeadLetter waits for a dead letter whose reason contains want.
func waitDeadLetter(t *testing.T, b *bus.Bus, want string) bus.DeadLetter {
	t.Helper()
	var found bus.DeadLetter
	waitFor(t, "a dead letter with "+want, func() (bool, string) {
		var reasons []string
		for _, dl := range bustest.DeadLetters(t, b) {
			if strings.Contains(dl.Reason, want) {
				found = dl
				return true, ""
			}
			reasons = append(reasons, dl.Reason)
		}
		return false, fmt.Sprint(reasons)
	})
	return found
}

// pendingCall returns the stored call of the conversation's batch.
func pendingCall(t *testing.T, c *conversation.State, id string) *conversation.PendingCall {
	t.Helper()
	if c.Batch == nil {
		t.Fatalf("conversation %s has no batch", c.ID)
	}
	for _, pc := range c.Batch.Calls {
		if pc.ToolCallID == id {
			return pc
		}
	}
	t.Fatalf("conversation %s has no call %s: %s", c.ID, id, describe(c))
	return nil
}

// waitCall waits until the stored call satisfies cond.
func waitCall(t *testing.T, o *orchestrator.Orchestrator, convID, callID, what string, cond func(*conversation.PendingCall) bool) *conversation.State {
	t.Helper()
	var c *conversation.State
	waitFor(t, what, func() (bool, string) {
		var err error
		c, err = o.Conversation(ctxT(t), convID)
		if err != nil {
			return false, err.Error()
		}
		if c.Batch == nil {
			return false, describe(c)
		}
		for _, pc := range c.Batch.Calls {
			if pc.ToolCallID == callID && cond(pc) {
				return true, ""
			}
		}
		return false, describe(c)
	})
	return c
}

// demoAgent is the built-in demo config with edits applied to its YAML.
func demoAgent(t *testing.T, edits ...string) *orchestrator.AgentConfig {
	t.Helper()
	data, err := os.ReadFile("../agentconfig/demo/agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for i := 0; i+1 < len(edits); i += 2 {
		if !strings.Contains(s, edits[i]) {
			t.Fatalf("demo agent has no %q", edits[i])
		}
		s = strings.Replace(s, edits[i], edits[i+1], 1)
	}
	script, err := os.ReadFile("../agentconfig/demo/script.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := agentconfig.Parse([]byte(s), fstest.MapFS{"script.yaml": {Data: script}})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// waitPublished waits until o has published n calls and returns the
// conversation as it is then (paused, unless something answered meanwhile).
// A paused run's calls are published without a mark in the state, so the
// count of what was sent tells it.
func waitPublished(t *testing.T, o *orchestrator.Orchestrator, convID string, n int64) *conversation.State {
	t.Helper()
	var c *conversation.State
	waitFor(t, fmt.Sprintf("%d calls to be published", n), func() (bool, string) {
		var err error
		c, err = o.Conversation(ctxT(t), convID)
		if err != nil {
			return false, err.Error()
		}
		if got := o.Stats().Published.Load(); got < n {
			return false, fmt.Sprintf("published %d; %s", got, describe(c))
		}
		return c.Batch != nil, describe(c)
	})
	return c
}

// startPaused starts the seed prompt and waits until its batch is
// published.
func startPaused(t *testing.T, o *orchestrator.Orchestrator) *conversation.State {
	t.Helper()
	info, err := o.StartRun(ctxT(t), seedPrompt, "")
	if err != nil {
		t.Fatal(err)
	}
	var c *conversation.State
	waitFor(t, "the batch to be published", func() (bool, string) {
		c, err = o.Conversation(ctxT(t), info.ConversationID)
		if err != nil {
			return false, err.Error()
		}
		if c.Status != conversation.StatusPaused || c.Batch == nil {
			return false, describe(c)
		}
		if n := o.Stats().Published.Load(); n < int64(len(c.Batch.Calls)) {
			return false, fmt.Sprintf("published %d; %s", n, describe(c))
		}
		return true, ""
	})
	return c
}

// cutBus is an orchestrator's connection to e's server through a
// CutProxy, which the test arms and cuts.
func cutBus(t *testing.T, e *env) (*bustest.CutProxy, *bus.Bus) {
	t.Helper()
	proxy := bustest.NewCutProxy(t, e.srv().ClientURL())
	ob, err := bus.Connect(ctxT(t), bus.ConnConfig{URL: proxy.URL(), Name: "orchestrator", PublishTimeout: time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ob.Close)
	return proxy, ob
}
