// Package agent is the agent loop: it sends a conversation to a Model, runs
// the tools the model calls, defers the calls that need an approval or an
// external result, lets inline handlers resolve them, and pauses the run with
// a deferred.Requests batch when something is left. A paused run is resumed by
// a new run given its history and a deferred.Results. The rules it follows are
// D1–D34 of docs/semantics.md.
package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Config configures an Agent.
type Config struct {
	// Model answers the conversation. Required.
	Model Model
	// Instructions are the system instructions sent with every model
	// request. Empty means none.
	Instructions string
	// Tools are the agent's own tools. Nil means none.
	Tools []Tool
	// Toolsets provide more tools, asked once at the start of every run.
	// Tool names must be unique across Tools and all toolsets.
	Toolsets []Toolset
	// Handlers resolve deferred calls inline, asked in this order (D13).
	// Nil means none: deferred calls end the run (if AllowDeferred).
	Handlers []Handler
	// AllowDeferred makes a deferred.Requests batch an allowed output: a run
	// with unresolved deferred calls then ends paused instead of failing
	// (D10). Defaults to false.
	AllowDeferred bool
	// MaxModelRequests bounds the model requests of one run; a run that
	// would exceed it fails. Zero means 50.
	MaxModelRequests int
	// Logger receives debug records of run progress. Nil discards them.
	Logger *slog.Logger
	// NewID makes run and conversation ids (and ids for tool calls a model
	// sent without one). Nil means 16 random bytes in hex.
	NewID func() string
	// Clock stamps messages and events. Nil means time.Now in UTC.
	Clock func() time.Time
}

func (c Config) withDefaults() Config {
	if c.MaxModelRequests == 0 {
		c.MaxModelRequests = 50
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.NewID == nil {
		c.NewID = randomID
	}
	if c.Clock == nil {
		c.Clock = func() time.Time { return time.Now().UTC() }
	}
	return c
}

func (c Config) validate() error {
	if c.Model == nil {
		return errors.New("model is nil")
	}
	if c.MaxModelRequests < 0 {
		return fmt.Errorf("max model requests %d is negative", c.MaxModelRequests)
	}
	seen := map[string]bool{}
	for _, t := range c.Tools {
		if t.decode == nil {
			return errors.New("a tool was not built with NewTool, NewRawTool or ExternalToolset")
		}
		if seen[t.def.Name] {
			return fmt.Errorf("tool %s is declared twice", t.def.Name)
		}
		seen[t.def.Name] = true
	}
	for i, ts := range c.Toolsets {
		if ts == nil {
			return fmt.Errorf("toolset %d is nil", i)
		}
	}
	for i, h := range c.Handlers {
		if h == nil {
			return fmt.Errorf("handler %d is nil", i)
		}
	}
	return nil
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Agent runs conversations against a model with a set of tools. It is safe
// for concurrent use; each run has its own state.
type Agent struct {
	cfg Config
}

// New checks cfg and builds an Agent.
func New(cfg Config) (*Agent, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	return &Agent{cfg: cfg}, nil
}

// tools collects the run's tools, in declaration order.
func (a *Agent) tools(ctx context.Context) ([]Tool, map[string]*Tool, error) {
	list := append([]Tool(nil), a.cfg.Tools...)
	for _, ts := range a.cfg.Toolsets {
		more, err := ts.Tools(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("list tools: %w", err)
		}
		list = append(list, more...)
	}
	byName := make(map[string]*Tool, len(list))
	for i := range list {
		t := &list[i]
		if t.decode == nil {
			return nil, nil, errors.New("list tools: a tool was not built with NewTool, NewRawTool or ExternalToolset")
		}
		if _, dup := byName[t.def.Name]; dup {
			return nil, nil, fmt.Errorf("list tools: tool %s is declared twice", t.def.Name)
		}
		byName[t.def.Name] = t
	}
	return list, byName, nil
}
