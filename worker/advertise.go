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

// advertise renews the advertisements until ctx ends, every AdvertiseEvery
// and whenever Readvertise asks. A bucket that is missing or a failed put is
// logged, never fatal. A tool its handler withdraws (Advertiser) has its entry deleted,
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
				Name:        tool.Name,
				Description: tool.Description,
				Parameters:  tool.Parameters,
			}
			if adv, ok := tool.Handler.(Advertiser); ok {
				ad, offered := adv.Advert(tool.Name)
				if !offered {
					if !withdrawn[tool.Name] && putRev[tool.Name] > 0 {
						withdrawn[tool.Name] = true
						// Only this worker's own entry: another worker may still offer it.
						if err := kv.Delete(ctx, tool.Name, putRev[tool.Name]); err != nil && ctx.Err() == nil {
							w.log.WarnContext(ctx, "withdraw advertisement", slog.String("tool", tool.Name), slog.Any("error", err))
						}
					}
					continue
				}
				delete(withdrawn, tool.Name)
				a.Description, a.Parameters = ad.Description, ad.Parameters
				a.MCPServer, a.MCPTool, a.Annotations = ad.MCPServer, ad.MCPTool, ad.Annotations
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
		kv, err := w.bus.Tools(ctx)
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
