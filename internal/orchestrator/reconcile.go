package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

func (o *Orchestrator) reconcileLoop() {
	t := newTicker(o.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-o.stopping:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(o.runCtx, o.cfg.ReconcileInterval)
		if err := o.reconcile(ctx); err != nil {
			o.log.WarnContext(ctx, "reconcile", slog.String("error", err.Error()))
		}
		cancel()
	}
}

// reconcile goes over every stored conversation and does what a crash or a
// replica that went away may have left undone: publish a batch's unmarked
// calls, claim a batch that became complete, settle calls past their
// deadline, relaunch a run whose lease expired; and it rebuilds the
// deadline index from KV.
func (o *Orchestrator) reconcile(ctx context.Context) error {
	ids, err := o.store.conversationIDs(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if o.stopped.Load() {
			break
		}
		if err := o.reconcileOne(ctx, id); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, fmt.Errorf("conversation %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

func (o *Orchestrator) reconcileOne(ctx context.Context, id string) error {
	c, _, err := o.store.get(ctx, id)
	if err != nil {
		return err
	}
	now := o.clock()
	switch c.Status {
	case StatusPaused:
		if c.Batch == nil {
			return nil
		}
		if unpublished(c.Batch) {
			if err := o.publishBatch(ctx, c); err != nil {
				return err
			}
		}
		if c.Batch.complete() {
			o.claim(ctx, id)
			return nil
		}
		if next := c.Batch.nextDeadline(); !next.After(now) {
			o.expire(ctx, id)
			return nil
		}
		o.schedule(c)
	case StatusRunning, StatusResuming:
		if c.Lease == nil || !c.Lease.Until.After(now) {
			o.relaunch(ctx, id)
			return nil
		}
		o.schedule(c)
	}
	return nil
}

func unpublished(b *Batch) bool {
	for _, pc := range b.Calls {
		if !pc.Published && pc.Reply == nil {
			return true
		}
	}
	return false
}
