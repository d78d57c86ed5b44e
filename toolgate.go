// Package toolgate runs a toolgate orchestrator inside a Go program, in
// production: on the program's NATS connection, with its agent (a YAML
// config as the orchestrator's --agent file, whose tools may all be Go
// ones), its in-process tools and inline handlers (package agenttool), its model (any
// Model; NewOpenAIModel for an OpenAI-compatible endpoint) and, if it
// wants one, the HTTP API mounted on its own mux.
//
//	o, err := toolgate.New(nc, toolgate.Config{Agent: agentYAML, Tools: tools, Deps: db})
//	if err := o.Start(ctx); err != nil { … }
//	mux.Handle("/v1/", o.Handler())
//	…
//	o.Stop(shutdownCtx) // drains the runs under way
//
// Everything else is the deployed orchestrator's: conversations are stored
// in JetStream, deferred calls go to workers and approvers over NATS and
// expire, any number of replicas (programs or the orchestrator binary with
// the same agent) share the work, and a run whose replica died is taken
// over. Package toolgatetest runs one of these in a test.
//
// The API is v0: it may still change between minor versions.
package toolgate

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/agenttool"
	iagent "github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/agent/openai"
	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// Config configures an Orchestrator. Agent is required; the rest has
// defaults.
type Config struct {
	// Agent is the agent config, YAML or JSON as the orchestrator's --agent
	// file reads it: model, instructions, tools, discover. Decoded strictly:
	// an unknown field or a wrong type is an error naming it. With Tools
	// it may name no tools of its own.
	Agent []byte
	// AgentDir resolves the files Agent names (a script model's
	// responses). Nil: such a config fails.
	AgentDir fs.FS
	// Model, when set, is the agent's model instead of the one Agent names
	// (whose provider block is then only checked).
	Model Model
	// LookupEnv resolves the config's api_key_env; nil means no
	// environment, and a config that names a variable fails.
	LookupEnv func(string) (string, bool)
	// Tools are the agent's in-process Go tools besides the config's,
	// Handlers inline handlers of its deferred calls (package agenttool).
	Tools    []agenttool.Tool
	Handlers []agenttool.Handler
	// Deps is RunContext.Deps of every run: what the program's tools,
	// approval rules (agenttool.RequireApproval) and handlers need from it.
	Deps any
	// TrustedApprovers, when set, makes the orchestrator count only
	// decisions signed by the key of the approver they name.
	TrustedApprovers map[string]ed25519.PublicKey
	// SetUp creates or updates the streams and buckets at Start (the
	// orchestrator binary's --setup). Leave it off when an operator
	// manages them, or when the connection's user may not.
	SetUp bool
	// InstanceID names this replica in leases and logs; defaults to a
	// random id. MaxConcurrentRuns (16), RunTimeout (10m), LeaseTTL (30s),
	// ReconcileInterval (15s) and Retention (0: keep) are the
	// orchestrator's flags of those names.
	InstanceID        string
	MaxConcurrentRuns int
	RunTimeout        time.Duration
	LeaseTTL          time.Duration
	ReconcileInterval time.Duration
	Retention         time.Duration
	// APIToken, when set, is the bearer token Handler's API asks of every
	// request but /healthz (the orchestrator's --http-token-file): give it
	// to the clients (client.Config.Token).
	APIToken string
	// Logger receives the orchestrator's log; nil discards it.
	Logger *slog.Logger
}

// Orchestrator is an orchestrator replica running in this process.
type Orchestrator struct {
	o      *orchestrator.Orchestrator
	b      *bus.Bus
	setUp  bool
	token  string
	logger *slog.Logger
}

// New checks cfg and builds an orchestrator on nc, which the caller
// opened (its options, auth and reconnect policy stay the caller's) and
// closes after Stop. Nothing is started until Start.
func New(nc *nats.Conn, cfg Config) (*Orchestrator, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.Agent) == 0 {
		return nil, errors.New("toolgate: Config.Agent is required")
	}
	parse := agentconfig.Parse
	if len(cfg.Tools) > 0 {
		parse = agentconfig.ParseWithGoTools
	}
	ac, err := parse(cfg.Agent, cfg.AgentDir)
	if err != nil {
		return nil, fmt.Errorf("toolgate: agent config: %w", err)
	}
	b, err := bus.FromConn(nc, bus.ConnConfig{Name: "toolgate-orchestrator", Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("toolgate: %w", err)
	}
	o, err := orchestrator.New(cfg.engine(b, ac, logger))
	if err != nil {
		return nil, fmt.Errorf("toolgate: %w", err)
	}
	return &Orchestrator{o: o, b: b, setUp: cfg.SetUp, token: cfg.APIToken, logger: logger}, nil
}

// engine is the engine's config for cfg, on b with the agent config ac.
// Every field of Config reaches it but those the façade keeps (Agent and
// AgentDir, parsed into ac; SetUp and APIToken, which Start and Handler
// use); TestEngineConfigCarriesEveryField holds it to that.
func (cfg Config) engine(b *bus.Bus, ac *orchestrator.AgentConfig, logger *slog.Logger) orchestrator.Config {
	tools := make([]iagent.Tool, len(cfg.Tools))
	for i, t := range cfg.Tools {
		tools[i] = iagent.Tool(t)
	}
	return orchestrator.Config{
		Bus: b, Agent: ac, Model: cfg.Model, LookupEnv: cfg.LookupEnv,
		Tools: tools, Handlers: cfg.Handlers, Deps: cfg.Deps,
		TrustedApprovers: cfg.TrustedApprovers, InstanceID: cfg.InstanceID,
		MaxConcurrentRuns: cfg.MaxConcurrentRuns, RunTimeout: cfg.RunTimeout,
		LeaseTTL: cfg.LeaseTTL, ReconcileInterval: cfg.ReconcileInterval,
		Retention: cfg.Retention, Logger: logger,
	}
}

// Start sets up the streams when Config.SetUp says so, then starts taking
// runs, replies and expiries; it returns once the replica is serving.
func (o *Orchestrator) Start(ctx context.Context) error {
	if o.setUp {
		if err := o.b.Setup(ctx, bus.SetupConfig{}); err != nil {
			return fmt.Errorf("toolgate: set up streams: %w", err)
		}
	}
	return o.o.Start(ctx)
}

// Stop stops taking new work and waits, until ctx ends, for the runs under
// way to store their end, then for its publishes to be acknowledged; a
// run cut off by ctx is taken over by another replica (or this program's
// next start) when its lease runs out. The connection stays open.
func (o *Orchestrator) Stop(ctx context.Context) error {
	err := o.o.Stop(ctx)
	o.b.Close()
	return err
}

// Handler serves the orchestrator's HTTP API (/v1/runs, /v1/conversations,
// their event streams, /v1/pending), as package client speaks it. Mount it
// on the program's mux; a replica that serves no API still takes its share
// of the runs, replies and expiries that other replicas' APIs started.
// With Config.APIToken every request but /healthz needs it as a bearer
// token.
func (o *Orchestrator) Handler() http.Handler {
	return api.Handler(o.o, api.Config{Token: o.token, Logger: o.logger})
}

// Model is what answers the agent: given the instructions, the history and
// the tools, one response of text and tool calls. The types are package
// agent's, named here for a program that implements its own model.
type (
	Model         = agent.Model
	ModelRequest  = agent.ModelRequest
	ModelResponse = agent.ModelResponse
	// Message is one entry of the history: a request to the model (a
	// prompt, tool returns) or its response (text, tool calls).
	Message = agent.Message
	// Part is one piece of a message, tagged by its Kind.
	Part     = agent.Part
	PartKind = agent.PartKind
	// ToolDef describes a tool to the model.
	ToolDef = agent.ToolDef
	// Usage counts a response's tokens where the model reports them.
	Usage = agent.Usage
)

// Message kinds and part kinds.
const (
	KindRequest  = agent.KindRequest
	KindResponse = agent.KindResponse

	PartSystemPrompt = agent.PartSystemPrompt
	PartUserPrompt   = agent.PartUserPrompt
	PartText         = agent.PartText
	PartToolCall     = agent.PartToolCall
	PartToolReturn   = agent.PartToolReturn
	PartRetryPrompt  = agent.PartRetryPrompt
)

// OpenAIConfig configures NewOpenAIModel.
type OpenAIConfig struct {
	// Model is the model name sent to the server, e.g. "gpt-4.1-mini" or
	// "qwen3:8b". Required.
	Model string
	// BaseURL is the server's API root, e.g. "http://localhost:8000/v1".
	// Empty means the OpenAI API (https://api.openai.com/v1/).
	BaseURL string
	// APIKey is sent as a bearer token. Empty sends none, which local
	// servers usually accept.
	APIKey string
	// Stream selects the streaming API. Defaults to false.
	Stream bool
	// MaxRetries is how often a connection error, 408, 409, 429 or 5xx
	// answer is retried (a stream only before its first delta). Zero means
	// 4; a negative value disables retries.
	MaxRetries int
	// Backoff is the wait before the first retry; each next one doubles,
	// up to 30s (or Backoff, if longer), less up to a quarter at random. A
	// retried answer's Retry-After (seconds or an HTTP-date) or
	// Retry-After-Ms sets the wait instead; one that asks for more than 2
	// minutes is not retried. Zero means 1s.
	Backoff time.Duration
	// Timeout bounds each HTTP attempt, a whole stream included. Zero
	// means no bound other than the request's context.
	Timeout time.Duration
	// HTTPClient sends the requests. Nil means http.DefaultClient.
	HTTPClient *http.Client
	// Temperature, when set, is sent as the sampling temperature. Nil
	// leaves it to the server.
	Temperature *float64
	// Logger receives retry and truncation notices. Nil discards them.
	Logger *slog.Logger
}

// NewOpenAIModel returns a Model on an OpenAI-compatible chat completions
// endpoint (openai-go/v3), the provider the config's "openai" names.
func NewOpenAIModel(cfg OpenAIConfig) (Model, error) {
	// A conversion, not a copy field by field: it compiles only while the
	// two structs have the same fields.
	return openai.New(openai.Config(cfg))
}
