package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
)

// Advertisement is the value a worker puts under its tool's name in the
// toolgate_tools bucket. Workers serving the same tool overwrite each other;
// the entry expires with the bucket's TTL once none renews it.
type Advertisement struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	// Kind is "call": the tool's calls are external (kind=call deferrals).
	Kind     string    `json:"kind"`
	Executor string    `json:"executor"`
	WorkerID string    `json:"worker_id"`
	At       time.Time `json:"at"`
}

// advertise renews the advertisements until ctx ends. A bucket that is
// missing or a failed put is logged, never fatal: advertisements are a
// convenience for UIs and orchestrator configs.
func (w *Worker) advertise(ctx context.Context) {
	kv, err := w.cfg.Bus.Tools(ctx)
	if err != nil {
		w.log.WarnContext(ctx, "tool advertisements disabled", slog.Any("error", err))
		return
	}
	t := time.NewTicker(w.cfg.AdvertiseEvery)
	defer t.Stop()
	for {
		for _, tool := range w.cfg.Tools {
			a := Advertisement{
				Name:        tool.Spec.Name,
				Description: tool.Spec.Description,
				Parameters:  tool.Spec.Parameters,
				Kind:        bus.ReplyKindCall,
				Executor:    tool.Kind,
				WorkerID:    w.cfg.ID,
				At:          w.cfg.Now().UTC(),
			}
			data, err := json.Marshal(a)
			if err != nil {
				w.log.WarnContext(ctx, "encode advertisement", slog.String("tool", a.Name), slog.Any("error", err))
				continue
			}
			if _, err := kv.Put(ctx, a.Name, data); err != nil && ctx.Err() == nil {
				w.log.WarnContext(ctx, "advertise tool", slog.String("tool", a.Name), slog.Any("error", err))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
