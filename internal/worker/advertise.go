package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// advertiser is an executor that says itself what to advertise for a tool
// (an MCP server, whose tools change while it runs); ok false means the tool
// is no longer offered and is not advertised.
type advertiser interface {
	advertFor(name string) (a bus.ToolAdvert, ok bool)
}

// advertise renews the advertisements until ctx ends, every AdvertiseEvery
// and whenever Readvertise asks. A bucket that is missing or a failed put is
// logged, never fatal. A tool its executor withdraws has its entry deleted,
// once.
func (w *Worker) advertise(ctx context.Context) {
	kv := w.openTools(ctx)
	if kv == nil {
		return
	}
	t := time.NewTicker(w.cfg.AdvertiseEvery)
	defer t.Stop()
	withdrawn := map[string]bool{}
	putRev := map[string]uint64{} // revision of this worker's last put, per tool
	for {
		for _, tool := range w.toolList() {
			a := bus.ToolAdvert{
				Name:        tool.Spec.Name,
				Description: tool.Spec.Description,
				Parameters:  tool.Spec.Parameters,
			}
			if adv, ok := tool.Executor.(advertiser); ok {
				var offered bool
				if a, offered = adv.advertFor(tool.Spec.Name); !offered {
					if !withdrawn[tool.Spec.Name] && putRev[tool.Spec.Name] > 0 {
						withdrawn[tool.Spec.Name] = true
						// Only this worker's own entry: another worker may still offer it.
						if err := kv.Delete(ctx, tool.Spec.Name, putRev[tool.Spec.Name]); err != nil && ctx.Err() == nil {
							w.log.WarnContext(ctx, "withdraw advertisement", slog.String("tool", tool.Spec.Name), slog.Any("error", err))
						}
					}
					continue
				}
				delete(withdrawn, tool.Spec.Name)
			}
			a.Kind = wire.ReplyKindCall
			a.Executor = tool.Kind
			a.WorkerID = w.cfg.ID
			a.At = w.cfg.Clock().UTC()
			data, err := json.Marshal(a)
			if err != nil {
				w.log.WarnContext(ctx, "encode advertisement", slog.String("tool", a.Name), slog.Any("error", err))
				continue
			}
			rev, err := kv.Put(ctx, a.Name, data)
			if err != nil && ctx.Err() == nil {
				w.log.WarnContext(ctx, "advertise tool", slog.String("tool", a.Name), slog.Any("error", err))
			}
			putRev[a.Name] = rev
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.dyn.readvertise:
		}
	}
}

// Bounds of the pause between attempts to open the toolgate_tools bucket.
const (
	openToolsRetryMin = 250 * time.Millisecond
	openToolsRetryMax = 30 * time.Second
)

// openTools opens the toolgate_tools bucket, trying again with growing
// pauses while it cannot: a worker may start on an external server before
// the orchestrator has set it up, and its tools are to be advertised once
// the bucket exists. Only a permission error (the user may not write
// adverts) gives up. nil when it gave up or ctx ended.
func (w *Worker) openTools(ctx context.Context) *bus.KV {
	pause := openToolsRetryMin
	for attempt := 1; ; attempt++ {
		kv, err := w.cfg.Bus.Tools(ctx)
		if err == nil {
			if attempt > 1 {
				w.log.InfoContext(ctx, "tool advertisements enabled", slog.Int("attempt", attempt))
			}
			return kv
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, bus.ErrPermissionDenied) {
			w.log.WarnContext(ctx, "tool advertisements disabled", slog.Any("error", err))
			return nil
		}
		if attempt == 1 || pause == openToolsRetryMax {
			w.log.WarnContext(ctx, "tool advertisements not possible yet; retrying", slog.Int("attempt", attempt),
				slog.Duration("retry_in", pause), slog.Any("error", err))
		}
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
		pause = min(pause*2, openToolsRetryMax)
	}
}
