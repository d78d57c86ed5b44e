// Package site is the orchestrator's whole HTTP surface: the API, the chat
// adapters (AG-UI, AI SDK) behind its authentication, and the chat page.
// cmd/orchestrator serves it; the API's test checks docs/openapi.yaml
// against its Patterns, so a route added here is a route documented there.
package site

import (
	"maps"
	"net/http"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/chat"
	"github.com/toolgate/toolgate/internal/chat/agui"
	"github.com/toolgate/toolgate/internal/chat/aisdk"
	"github.com/toolgate/toolgate/internal/chat/page"
)

// Engine is what the API and the chat adapters need of the orchestrator
// (*orchestrator.Orchestrator).
type Engine interface {
	api.Engine
	chat.Engine
}

// Config configures the site.
type Config struct {
	// API configures the API. Its Routes are the chat adapters' besides
	// any given here.
	API api.Config
	// Chat configures the chat adapters.
	Chat chat.Config
}

// Handler returns the site: the chat page's files (no token: a browser
// cannot send one on a navigation), and every other request to the API,
// whose authentication the page's own requests meet.
func Handler(e Engine, cfg Config) http.Handler {
	return page.Handler(api.Handler(e, withChat(e, cfg)))
}

// Patterns lists the patterns the API of Handler(_, cfg) registers
// (api.Patterns), the chat adapters' included; the chat page's own
// (page.Path and its files) are not among them.
func Patterns(cfg Config) []string {
	return api.Patterns(withChat(nil, cfg))
}

func withChat(e Engine, cfg Config) api.Config {
	c := cfg.API
	aiSDK := aisdk.Handler(e, cfg.Chat)
	c.Routes = map[string]http.Handler{
		"POST /v1/agui":                   agui.Handler(e, cfg.Chat),
		"POST /v1/ai-sdk/chat":            aiSDK,
		"GET /v1/ai-sdk/chat/{id}/stream": aiSDK,
	}
	maps.Copy(c.Routes, cfg.API.Routes)
	return c
}
