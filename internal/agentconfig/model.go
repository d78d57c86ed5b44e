package agentconfig

import (
	"fmt"
	"log/slog"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/agent/openai"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// NewModel makes the model the config names; lookupEnv resolves its
// api_key_env. Parse sets it as the config's ModelFunc.
func NewModel(cfg *orchestrator.AgentConfig, lookupEnv func(string) (string, bool), logger *slog.Logger) (agent.Model, error) {
	switch cfg.Model.Provider {
	case ProviderOpenAI:
		key := cfg.Model.APIKey
		if key == "" && cfg.Model.APIKeyEnv != "" {
			if lookupEnv == nil {
				return nil, fmt.Errorf("model.api_key_env: %s cannot be looked up here", cfg.Model.APIKeyEnv)
			}
			v, ok := lookupEnv(cfg.Model.APIKeyEnv)
			if !ok || v == "" {
				return nil, fmt.Errorf("model.api_key_env: %s is not set", cfg.Model.APIKeyEnv)
			}
			key = v
		}
		oc := openai.Config{Model: cfg.Model.Name, BaseURL: cfg.Model.BaseURL, APIKey: key, Stream: cfg.Model.Stream,
			Backoff: cfg.Model.Backoff.D(), Logger: logger}
		if r := cfg.Model.Retries; r != nil {
			oc.MaxRetries = *r
			if *r == 0 {
				oc.MaxRetries = -1 // openai.Config's zero is its default
			}
		}
		m, err := openai.New(oc)
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		return m, nil
	case ProviderScript:
		return agent.NewScriptModel(cfg.Model.Name, cfg.Script), nil
	case ProviderTest:
		return agent.NewTestModel(), nil
	}
	return nil, fmt.Errorf("model.provider: unknown provider %q", cfg.Model.Provider)
}
