package orchestrator

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/telemetry"
)

// Config configures an Orchestrator.
type Config struct {
	// Bus is the connection; its streams and KV buckets must exist
	// (bus.Setup). Required.
	Bus *bus.Bus
	// EventBus, when set, is a second connection that carries the events
	// (toolgate.event.*), so that a busy run's events are not queued ahead
	// of the state writes, calls and acks on Bus. Defaults to Bus.
	EventBus *bus.Bus
	// Agent is the agent to run when Agents is empty; its name is its
	// config's, or DefaultAgentName.
	Agent *AgentConfig
	// Agents are the agents this replica runs, each named by its config's
	// Name (unique; empty is DefaultAgentName). The first is the default
	// of a start that names none when no other replica runs another. A
	// replica runs only conversations of its agents (docs/architecture.md,
	// "Agents"). One of Agent and Agents is required.
	Agents []*AgentConfig
	// Model, when set, replaces the model of every agent config (tests,
	// embedding programs).
	Model agent.Model
	// AgentWait is how long a conversation that needs a run may wait for a
	// replica running its agent (with its config digest, or one that may
	// adopt it) before it fails: it is told in an agent_unavailable event
	// and in its state at once, and fails with the reason after this.
	// Defaults to 10m.
	AgentWait time.Duration
	// Tools are in-process Go tools the agent has besides the config's
	// (a program that embeds the orchestrator): they run inside the run,
	// and may defer themselves (deferred.ApprovalRequired from a
	// validator, which sees the run's context) like any agent tool. A
	// deferred call of a tool the config does not name gets the default
	// deadlines.
	Tools []agent.Tool
	// Handlers are inline handlers of deferred calls, asked after the
	// orchestrator's own (agent.Handler): what they resolve never leaves
	// the run.
	Handlers []agent.Handler
	// Deps is what every run's tools, approval rules and handlers see as
	// RunContext.Deps (an embedding program's database, clients, config).
	Deps any
	// LookupEnv resolves the agent config's api_key_env. Nil means no
	// environment: a config that names a variable fails.
	LookupEnv func(string) (string, bool)
	// TrustedApprovers maps approver ids to their ed25519 public keys: the
	// AgentConfig.Trust of every agent whose config sets none (folded in
	// before its digest is taken). When an agent's trust is non-empty, a
	// decision counts only if it is signed by the key of the approver it
	// names (D36). Empty: decisions are not signature-checked.
	TrustedApprovers map[string]ed25519.PublicKey
	// InstanceID names this replica in leases and logs. Defaults to a
	// random id.
	InstanceID string
	// MaxConcurrentRuns bounds the runs whose agent executes at once (a
	// run that ended holds no slot while its end is stored; four times as
	// many ends may be stored at once). Defaults to 16.
	MaxConcurrentRuns int
	// RunTimeout bounds one run. Defaults to 10m.
	RunTimeout time.Duration
	// LeaseTTL is how long a run's lease lasts without renewal; a run whose
	// replica died is relaunched after it. Defaults to 30s.
	LeaseTTL time.Duration
	// ReconcileInterval is how often stored conversations are scanned for
	// batches to publish, complete, expire or relaunch. Defaults to 15s.
	ReconcileInterval time.Duration
	// AdvertGrace is how long the tools no worker advertises when the
	// orchestrator starts have to be advertised before it warns about
	// them: workers start after it. Defaults to 30s.
	AdvertGrace time.Duration
	// Retention, when positive, is the AgentConfig.Retention of every
	// agent whose config sets none: how long a finished conversation is
	// kept after its last change; then it is deleted (Delete). Zero keeps
	// them.
	Retention time.Duration
	// ReplyConsumer names the durable consumer of TOOLGATE_REPLIES shared
	// by replicas. Defaults to "orchestrator".
	ReplyConsumer string
	// ReplyAckWait is the reply consumer's AckWait. Defaults to 30s.
	ReplyAckWait time.Duration
	// ReplyLinger is how long replies that leave their batch incomplete
	// wait for more of the same batch, to be recorded in one write (the
	// reply completing a batch never waits). Defaults to 5ms; negative
	// records each group at once.
	ReplyLinger time.Duration
	// ClaimWindow is how long a run may go on before what it starts from
	// is stored: a follow-up's claim of its batch, a new conversation's
	// first record. A run that pauses or ends within it is stored with
	// that, as one record (tentative.go); a start is answered once it is
	// stored, at most this much later than it would be otherwise. Zero
	// means 50 ms; below zero, every claim and start is stored before its
	// run begins.
	ClaimWindow time.Duration
	// StateCacheBytes bounds the heap of the conversation states kept in
	// memory (estimated as 1.2 times the bytes of the records folded into
	// them); a state that is not cached is read from its log when needed.
	// Defaults to a quarter of the Go memory limit (GOMEMLIMIT) when one is
	// set, else 256 MiB, which holds about 90,000 paused conversations of
	// a few messages (2.4 KB of records each); never less than 64 MiB by
	// default. Finished conversations take at most a sixty-fourth of it.
	StateCacheBytes int64
	// Clock is the time source for deadlines and leases. Defaults to
	// time.Now.
	Clock func() time.Time
	// NewID makes conversation and run ids: letters and digits only (a run
	// id joins its own part and its conversation's id with "_"). Defaults
	// to random ids.
	NewID func() string
	// Logger receives the orchestrator's log. Nil discards it.
	Logger *slog.Logger
	// Metrics receives the orchestrator's metrics (telemetry.
	// OrchestratorMetrics): runs by how they ended (completed, failed,
	// paused; interrupted, lease_lost, not_stored, dropped), replies by kind and
	// verdict, time to decision and to result, expiries, denials,
	// redeliveries, dead letters, the model's requests, and the deferred
	// calls pending by tool and kind, counted from the store at each scrape. nil
	// records nothing.
	Metrics *telemetry.OrchestratorMetrics
	// Observer is told, as the metrics are, what the orchestrator did
	// (observe.go): a *Counts counts it for a test, the bench or the
	// soak. nil tells only the metrics.
	Observer Observer
	// TracerProvider makes a span per run (and per model request) and per
	// reply consumed. The paused run's trace context is stored with its
	// batch and published with its calls; a follow-up run is the child of
	// the reply that completed its batch, so that one trace spans the
	// conversation across the pause. Defaults to the global provider
	// (no-op unless telemetry.Setup installed one; the trace context then
	// passes through unchanged).
	TracerProvider trace.TracerProvider
	// OnRunEnd, when set, is called once a run's end is stored (paused,
	// after its calls are published; completed; failed) with the
	// conversation as stored. It runs on the run's goroutine (a paused
	// run's, on the one that publishes its calls) and must neither keep
	// nor change c. It lets an embedding program, such as the
	// benchmark harness, learn how runs end without reading the store.
	OnRunEnd func(c *conversation.State)
	// ServerWriteError, when set, returns the write error the NATS server
	// keeps for a stream after a write failed below its storage limit
	// (embedded.Server.WriteError; only an embedded server can be asked),
	// worded to say what clears it. Health reports it, and starts are
	// refused with it instead of waiting for an answer that the server
	// will not give while it keeps the error.
	ServerWriteError func() error

	// appendTimeout shortens the store's timeout for appends, for tests
	// (export_test.go).
	appendTimeout time.Duration
	// dispatchUnpublished leaves the calls dispatched on their approval
	// unpublished, as a replica that stopped right after storing the
	// decision would, for tests (export_test.go).
	dispatchUnpublished bool
}

func (c Config) withDefaults() Config {
	if c.InstanceID == "" {
		c.InstanceID = "orch-" + randomID()[:8]
	}
	if c.MaxConcurrentRuns <= 0 {
		c.MaxConcurrentRuns = 16
	}
	if c.RunTimeout <= 0 {
		c.RunTimeout = 10 * time.Minute
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 30 * time.Second
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = 15 * time.Second
	}
	if c.EventBus == nil {
		c.EventBus = c.Bus
	}
	if c.ReplyConsumer == "" {
		c.ReplyConsumer = "orchestrator"
	}
	if c.ReplyAckWait <= 0 {
		c.ReplyAckWait = 30 * time.Second
	}
	if c.ClaimWindow == 0 {
		c.ClaimWindow = claimWindow
	}
	if c.ReplyLinger == 0 {
		c.ReplyLinger = replyLinger
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.StateCacheBytes <= 0 {
		c.StateCacheBytes = defaultStateCacheBytes(debug.SetMemoryLimit(-1))
	}
	if c.NewID == nil {
		c.NewID = randomID
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.AgentWait <= 0 {
		c.AgentWait = 10 * time.Minute
	}
	return c
}

func (c Config) validate() error {
	if c.Bus == nil {
		return errors.New("bus is nil")
	}
	if id := c.NewID(); !alnum(id) {
		return fmt.Errorf("NewID made %q: ids must be letters and digits", id)
	}
	if err := validateAgents(c.agentList()); err != nil {
		return err
	}
	for name, k := range c.TrustedApprovers {
		if len(k) != ed25519.PublicKeySize {
			return fmt.Errorf("trusted approver %s: key is %d bytes, want %d", name, len(k), ed25519.PublicKeySize)
		}
	}
	return nil
}

func randomID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// claimWindow is how long a run may go on before what it starts from is
// stored (a follow-up's claim, a new conversation's start), by default
// (Config.ClaimWindow). It bounds how long the completing replies wait for
// their acknowledgement, and a start for its answer; the run's lease is
// not renewed before its claim is stored, which a window far below a third
// of the lease makes no matter.
const claimWindow = 50 * time.Millisecond

// agentList is Config.Agents, or Config.Agent alone.
func (c Config) agentList() []*AgentConfig {
	if len(c.Agents) > 0 {
		return c.Agents
	}
	if c.Agent != nil {
		return []*AgentConfig{c.Agent}
	}
	return nil
}

// serverWriteError is the NATS server's kept write error (Config.ServerWriteError),
// which says what clears it.
func (c Config) serverWriteError() error {
	if c.ServerWriteError == nil {
		return nil
	}
	if err := c.ServerWriteError(); err != nil {
		return fmt.Errorf("storage: %v", err)
	}
	return nil
}
