package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Toolset provides tools for a run. The loop asks each toolset once at the
// start of every run, so a toolset may change between runs (tools that
// workers advertise, for instance).
type Toolset interface {
	Tools(ctx context.Context) ([]Tool, error)
}

// ToolsetFunc adapts a function to Toolset.
type ToolsetFunc func(ctx context.Context) ([]Tool, error)

// Tools calls f.
func (f ToolsetFunc) Tools(ctx context.Context) ([]Tool, error) { return f(ctx) }

// staticToolset is a fixed list of tools.
type staticToolset []Tool

func (s staticToolset) Tools(context.Context) ([]Tool, error) { return s, nil }

// NewToolset groups tools into a Toolset, for instance to wrap them with
// ApprovalToolset.
func NewToolset(tools ...Tool) Toolset { return staticToolset(append([]Tool(nil), tools...)) }

// ExternalToolset exposes tools known only by name, description and JSON
// Schema (D3). Their calls are always deferred as external calls; their args
// are validated against the schema first, and invalid args go back to the
// model as a retry prompt. Each tool's retry budget is the default (1).
func ExternalToolset(defs ...ToolDef) (Toolset, error) {
	tools := make([]Tool, 0, len(defs))
	for _, def := range defs {
		if def.Name == "" {
			return nil, errors.New("external tool name is empty")
		}
		s, err := compileSchema(def.Name, def.Parameters)
		if err != nil {
			return nil, err
		}
		tools = append(tools, Tool{
			def:        def,
			schema:     s,
			external:   true,
			maxRetries: 1,
			decode:     func(raw json.RawMessage) (any, error) { return raw, nil },
		})
	}
	return staticToolset(tools), nil
}

// ApprovalToolset wraps inner so that pred decides, for each call of its
// tools, whether the call needs an approval (D4). pred sees the validated
// args; a call it approves by returning false runs as usual. Tools that
// already require approval keep requiring it.
//
// Wrapping an ExternalToolset gates external calls: pred is asked after the
// schema check (D5) and before the call is deferred, and a call it holds goes
// into the batch's Approvals. Once approved, the call is deferred again as an
// external call (D17, D26), with the override args when the decision gave
// some (D24); its batch entry carries those args. The predicate is not asked
// again for an approved call.
func ApprovalToolset(inner Toolset, pred ApprovalFunc) Toolset {
	return ToolsetFunc(func(ctx context.Context) ([]Tool, error) {
		if pred == nil {
			return nil, errors.New("approval toolset: predicate is nil")
		}
		tools, err := inner.Tools(ctx)
		if err != nil {
			return nil, fmt.Errorf("approval toolset: %w", err)
		}
		out := make([]Tool, len(tools))
		for i, t := range tools {
			prev := t.approvalFunc
			t.approvalFunc = func(rc *RunContext, def ToolDef, args json.RawMessage) (bool, error) {
				if prev != nil {
					ok, err := prev(rc, def, args)
					if err != nil || ok {
						return ok, err
					}
				}
				return pred(rc, def, args)
			}
			out[i] = t
		}
		return out, nil
	})
}
