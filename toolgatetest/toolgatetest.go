// Package toolgatetest starts a whole toolgate system inside a test: an
// embedded NATS server with JetStream in the test's temporary directory,
// the streams and buckets set up, an orchestrator running the agent you
// give it with its HTTP API on a loopback port, and whatever workers and
// approval bots the test adds. Everything stops at the test's cleanup.
//
//	sys := toolgatetest.Start(t, toolgatetest.Options{Agent: agentYAML, AgentDir: os.DirFS("testdata")})
//	w, _ := worker.New(sys.Conn(), worker.Config{})
//	worker.Register(w, "get_weather", "", getWeather)
//	sys.Go("worker", w.Run)
//	run, _ := sys.Client.Start(ctx, client.StartRequest{Prompt: "weather in Paris?"})
//	conv, _ := sys.Client.Wait(ctx, run.ConversationID)
//
// Like net/http/httptest, it is for tests; it links nats-server. The
// orchestrator is package toolgate's, as a program embeds it in
// production (examples/go-sdk/cmd/payments-agent).
package toolgatetest

import (
	"context"
	"crypto/ed25519"
	"io/fs"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/agenttool"
	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/testkit"
)

// Timeout bounds the waits of this package (starting, stopping), generous
// for a loaded machine.
const Timeout = 30 * time.Second

// Options configure a System.
type Options struct {
	// Agent is the agent config (YAML, as the orchestrator's --agent file):
	// model, instructions and tools. Empty: the built-in demo agent (the
	// file tools played by a script model).
	Agent []byte
	// AgentDir resolves the files the agent config names (a script
	// model's responses). Defaults to nothing: such a config fails.
	AgentDir fs.FS
	// TrustedApprovers, when set, makes the orchestrator accept only
	// decisions signed by the key of the approver they name.
	TrustedApprovers map[string]ed25519.PublicKey
	// Tools are in-process Go tools the agent has besides the config's,
	// Handlers inline handlers of its deferred calls (package agenttool).
	Tools    []agenttool.Tool
	Handlers []agenttool.Handler
	// Model, when set, answers instead of the model Agent names; Deps is
	// every run's RunContext.Deps (toolgate.Config).
	Model toolgate.Model
	Deps  any
	// APIToken, when set, is the bearer token the API asks for (Client
	// sends it; a request of the test's own must too).
	APIToken string
	// Logger receives every part's log. nil discards it.
	Logger *slog.Logger
}

// System is a running toolgate.
type System struct {
	// URL is the orchestrator's HTTP API, Client a client of it.
	URL    string
	Client *client.Client

	t      testing.TB
	kit    *testkit.System
	logger *slog.Logger
}

// Start starts a system for t; it stops at t's cleanup. A part that
// cannot start fails the test. The orchestrator is a toolgate.Orchestrator,
// as a program embeds it, on a connection of its own.
func Start(t testing.TB, opts Options) *System {
	t.Helper()
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// The orchestrator sets the streams up, as a program embedding it
	// does.
	s := &System{t: t, kit: testkit.Test(t, testkit.Options{Listen: true, NoSetup: true, Logger: logger, StopTimeout: Timeout}), logger: logger}

	agent, dir := opts.Agent, opts.AgentDir
	var err error
	if len(agent) == 0 {
		if agent, dir, err = agentconfig.DemoSource(); err != nil {
			t.Fatalf("toolgatetest: %v", err)
		}
	}
	o, err := toolgate.New(s.Conn(), opts.config(agent, dir, logger))
	if err != nil {
		t.Fatalf("toolgatetest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := o.Start(ctx); err != nil {
		t.Fatalf("toolgatetest: start orchestrator: %v", err)
	}
	httpSrv := httptest.NewServer(o.Handler())
	// Cleanups run last-in first-out: the API closes, then the
	// orchestrator stops, then the connection closes and the server ends.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		defer cancel()
		if err := o.Stop(ctx); err != nil {
			t.Errorf("toolgatetest: stop orchestrator: %v", err)
		}
	})
	t.Cleanup(httpSrv.Close)
	s.URL = httpSrv.URL
	if s.Client, err = client.New(client.Config{BaseURL: httpSrv.URL, Token: opts.APIToken}); err != nil {
		t.Fatal(err)
	}
	return s
}

// config is the orchestrator's config for opts, with the agent config and
// logger Start settled on; TestConfigCarriesEveryOption holds it to
// carrying every option.
func (opts Options) config(agent []byte, dir fs.FS, logger *slog.Logger) toolgate.Config {
	return toolgate.Config{
		Agent: agent, AgentDir: dir, Model: opts.Model, Deps: opts.Deps,
		Tools: opts.Tools, Handlers: opts.Handlers,
		TrustedApprovers: opts.TrustedApprovers, Logger: logger, SetUp: true, APIToken: opts.APIToken,
		// Short enough that a test sees expiries and relaunches promptly.
		ReconcileInterval: time.Second, LeaseTTL: 5 * time.Second,
	}
}

// NATSURL is the embedded server's client URL.
func (s *System) NATSURL() string { return s.kit.URL() }

// Conn opens a connection to the system's NATS server, for a worker or an
// approval bot; it is closed at cleanup.
func (s *System) Conn() *nats.Conn {
	s.t.Helper()
	nc, err := nats.Connect(s.kit.URL(), nats.Name("toolgatetest"))
	if err != nil {
		s.t.Fatalf("toolgatetest: connect: %v", err)
	}
	s.t.Cleanup(nc.Close)
	return nc
}

// Go runs fn (a worker's or a bot's Run) until the test's cleanup, which
// cancels its context and waits for it; an error other than the
// cancellation fails the test.
func (s *System) Go(name string, fn func(context.Context) error) {
	p := s.kit.Go(name, nil, fn)
	s.t.Cleanup(func() {
		if err := p.Stop(context.Background()); err != nil {
			s.t.Errorf("toolgatetest: %s: %v", name, err)
		}
	})
}

// Approve runs an approval bot named id that decides with d.
func (s *System) Approve(id string, key ed25519.PrivateKey, d approval.Decider) {
	s.t.Helper()
	bot, err := approval.New(s.Conn(), approval.Config{ID: id, Key: key, Logger: s.logger}, d)
	if err != nil {
		s.t.Fatalf("toolgatetest: %v", err)
	}
	s.Go("approval bot "+id, bot.Run)
}
