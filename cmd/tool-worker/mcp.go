package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	execcmd "github.com/toolgate/toolgate/internal/worker/command"
	"github.com/toolgate/toolgate/internal/worker/mcpexec"
)

// startMCP starts the --mcp servers with their --mcp-prefix and
// --mcp-header settings. It returns the servers started so far even on an
// error, for the caller to close.
func startMCP(ctx context.Context, o *options, logger *slog.Logger) ([]*mcpexec.Server, error) {
	prefixes := map[string]string{}
	for _, v := range o.mcpPrefixes {
		name, p, err := splitPair("mcp-prefix", v)
		if err != nil {
			return nil, err
		}
		prefixes[name] = p
	}
	headers, err := mcpHeaders(o)
	if err != nil {
		return nil, err
	}
	var servers []*mcpexec.Server
	for _, v := range o.mcps {
		name, target, err := splitPair("mcp", v)
		if err != nil {
			return servers, err
		}
		cfg := mcpexec.Config{Name: name, Prefix: prefixes[name], Logger: logger}
		if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
			cfg.URL, cfg.Header = target, headers[name]
		} else if headers[name] != nil {
			return servers, fmt.Errorf("--mcp-header %s: server %s is a command, not a URL", name, name)
		} else if cfg.Command, err = execcmd.SplitWords(target); err != nil {
			return servers, fmt.Errorf("--mcp %s: %w", name, err)
		}
		m, err := mcpexec.New(ctx, cfg)
		if err != nil {
			return servers, fmt.Errorf("--mcp %s: %w", name, err)
		}
		servers = append(servers, m)
	}
	return servers, nil
}

func mcpHeaders(o *options) (map[string]http.Header, error) {
	headers := map[string]http.Header{}
	for _, v := range o.mcpHeaders {
		name, spec, err := splitPair("mcp-header", v)
		if err != nil {
			return nil, err
		}
		if headers[name] == nil {
			headers[name] = http.Header{}
		}
		if err := mcpexec.AddHeader(headers[name], spec); err != nil {
			return nil, fmt.Errorf("--mcp-header %s: %w", name, err)
		}
	}
	for name := range headers {
		if !slices.ContainsFunc(o.mcps, func(v string) bool { n, _, _ := strings.Cut(v, "="); return strings.TrimSpace(n) == name }) {
			return nil, fmt.Errorf("--mcp-header %s: no --mcp %s=URL to send it to", name, name)
		}
	}
	return headers, nil
}
