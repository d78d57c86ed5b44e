package orchestrator

import (
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/telemetry/modeltel"
)

// buildAgent turns the agent config into an agent: its configured tools,
// and, with discover: entries, the tools workers advertise that match them,
// taken from the catalogue at the start of each run (discoveredToolset).
func (r *roster) buildAgent(cfg *AgentConfig) (*agent.Agent, error) {
	model := r.cfg.Model
	if model == nil {
		if cfg.ModelFunc == nil {
			return nil, errors.New("agent config has no model: set Config.Model, or read the config with package agentconfig")
		}
		m, err := cfg.ModelFunc(r.cfg.LookupEnv, r.cfg.Logger)
		if err != nil {
			return nil, err
		}
		model = m
	}
	model = modeltel.Wrap(model, modeltel.Config{Metrics: r.cfg.Metrics, TracerProvider: r.cfg.TracerProvider})
	tools := make([]agent.Tool, 0, len(cfg.Tools))
	for i := range cfg.Tools {
		t, err := r.discovery.newTool(agentName(cfg), &cfg.Tools[i])
		if err != nil {
			return nil, fmt.Errorf("tools[%d] (%s): %w", i, cfg.Tools[i].Name, err)
		}
		tools = append(tools, t)
	}
	tools = append(tools, r.cfg.Tools...)
	// The run's discovered tools and its frontend's (runTools).
	toolsets := []agent.Toolset{r.discovery.toolset(agentName(cfg))}
	var handlers []agent.Handler
	if cfg.InlineWait > 0 {
		wait := cfg.InlineWait.D()
		handlers = append(handlers, agent.HandlerFunc(func(rc *agent.RunContext, req *deferred.Requests) (*deferred.Results, error) {
			return r.inline(rc, req, wait)
		}))
	}
	handlers = append(handlers, r.cfg.Handlers...)
	a, err := agent.New(agent.Config{
		Model:            model,
		Instructions:     cfg.Instructions,
		Tools:            tools,
		Toolsets:         toolsets,
		Handlers:         handlers,
		AllowDeferred:    true,
		MaxModelRequests: cfg.MaxModelRequests,
		Logger:           r.cfg.Logger,
		Clock:            func() time.Time { return r.clock().UTC() },
	})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return a, nil
}
