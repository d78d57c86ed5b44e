package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// dynamicTools is the part of a Worker that lets tools be added while it
// runs (an MCP server that grew a tool). Guarded by Worker.mu.
type dynamicTools struct {
	ctx, subCtx context.Context     // Run's, once its consumers are up
	subs        []*bus.Subscription // every consumer, drained by Run
	readvertise chan struct{}       // asks the advertiser to renew now
}

// toolList is a copy of the tools served.
func (w *Worker) toolList() []Tool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.tools)
}

// started records Run's consumers and starts those of tools added while
// they were being created.
func (w *Worker) started(ctx, subCtx context.Context, subs []*bus.Subscription) {
	w.mu.Lock()
	w.dyn.ctx, w.dyn.subCtx = ctx, subCtx
	w.dyn.subs = append(w.dyn.subs, subs...)
	pending := slices.Clone(w.tools[len(subs):])
	w.mu.Unlock()
	for _, t := range pending {
		if err := w.startTool(t); err != nil {
			w.log.WarnContext(ctx, "serve added tool", slog.String("tool", t.Name), slog.Any("error", err))
		}
	}
}

// Handle adds a tool: before Run, to be served when it starts; while Run
// serves, on a consumer of its own, drained with the others (a tool that
// appeared on an MCP server). Its name must be a valid subject token and
// unique in the worker. It fails once the worker drains.
func (w *Worker) Handle(t Tool) error {
	if err := wire.ValidateToken("tool name", t.Name); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if t.Handler == nil {
		return fmt.Errorf("worker: tool %s has no handler", t.Name)
	}
	if len(t.Parameters) > 0 && !json.Valid(t.Parameters) {
		return fmt.Errorf("worker: tool %s: parameters are not valid JSON", t.Name)
	}
	if t.Kind == "" {
		t.Kind = "go"
	}
	w.mu.Lock()
	if slices.ContainsFunc(w.tools, func(o Tool) bool { return o.Name == t.Name }) {
		w.mu.Unlock()
		return fmt.Errorf("worker: tool %s is registered twice", t.Name)
	}
	if w.stopping != nil {
		select {
		case <-w.stopping:
			w.mu.Unlock()
			return fmt.Errorf("worker: tool %s: the worker is stopping", t.Name)
		default:
		}
	}
	w.tools = append(w.tools, t)
	up := w.dyn.subCtx != nil
	w.mu.Unlock()
	if !up {
		// Run has not started its consumers yet: it (or started) will.
		return nil
	}
	return w.startTool(t)
}

// startTool starts the consumer of a tool added while Run serves.
func (w *Worker) startTool(t Tool) error {
	w.mu.Lock()
	ctx, subCtx := w.dyn.ctx, w.dyn.subCtx
	w.mu.Unlock()
	sub, err := w.consume(ctx, subCtx, t)
	if err != nil {
		w.mu.Lock()
		w.tools = slices.DeleteFunc(w.tools, func(o Tool) bool { return o.Name == t.Name })
		w.mu.Unlock()
		return fmt.Errorf("tool %s: %w", t.Name, err)
	}
	w.mu.Lock()
	select {
	case <-w.stopping:
		// Run took its list of consumers to drain before this one was up.
		w.mu.Unlock()
		return w.drain([]*bus.Subscription{sub})
	default:
	}
	w.dyn.subs = append(w.dyn.subs, sub)
	w.mu.Unlock()
	w.log.Info("serving added tool", slog.String("tool", t.Name))
	return nil
}

// Readvertise asks the advertiser to renew every advertisement now, rather
// than at its next tick (a tool's description or schema changed).
func (w *Worker) Readvertise() {
	select {
	case w.dyn.readvertise <- struct{}{}:
	default:
	}
}
