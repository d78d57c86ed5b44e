package orchestrator

import (
	"context"
	"errors"
	"log/slog"

	"github.com/toolgate/toolgate/wire"
)

// cancelledData is the data of a conversation_cancelled event.
type cancelledData = wire.ConversationCancelled

// Cancel cancels a conversation that is not finished (*ConflictError for a
// finished one, ErrNotFound for an unknown one): its pending approvals are
// denied and its pending external calls failed as cancelled, and it becomes
// cancelled in one write, so that a reply either was applied before it or
// is refused as late after it. Then a cancel notice goes out for each run
// that may still be working (bus.PublishCancel): the replica executing a
// run cancels it at once, and workers stop that run's calls in flight; a
// notice that is lost only delays that (the run learns at its next lease
// renewal, a call's late reply is refused). The external calls it settled
// are withdrawn from the work queue (withdraw), so that no worker that
// comes later runs them.
func (o *Orchestrator) Cancel(ctx context.Context, id string) (*Conversation, error) {
	if o.stopped.Load() {
		return nil, ErrStopped
	}
	ctx = answersRequest(ctx)
	var (
		settled  []*PendingCall
		runs     []string
		batchRun string
	)
	c, err := o.store.update(ctx, id, func(c *Conversation) error {
		runs = c.workingRuns()
		batchRun = ""
		if c.Batch != nil {
			batchRun = c.Batch.RunID
		}
		var err error
		settled, err = c.Cancel(CancelledMessage, o.clock())
		return err
	})
	if err != nil {
		var ce *ConflictError
		if errors.As(err, &ce) {
			ce.Op = opCancel
		}
		o.storage.failed(err)
		// The client hears of the failure; a cancel stored all the same
		// still tells its runs, workers and watchers.
		o.store.followUpRequest(ctx, id, o.runner.goUnlessStopped, err, func() { o.cancelled(ctx, id, runs, batchRun, settled) })
		return nil, err
	}
	o.cancelled(ctx, id, runs, batchRun, settled)
	return c, nil
}

// cancelled tells what a stored cancel did: a notice to each run that may
// still be working, the withdrawal of the calls of batchRun it settled, and
// the conversation_cancelled event.
func (o *Orchestrator) cancelled(ctx context.Context, id string, runs []string, batchRun string, settled []*PendingCall) {
	for _, r := range runs {
		if err := o.bus.PublishCancel(r); err != nil {
			o.log.WarnContext(ctx, "cancel notice", slog.String("conversation_id", id), slog.String("run_id", r), slog.String("error", err.Error()))
		}
	}
	// Whether or not the client waits for the answer.
	o.withdraw(context.WithoutCancel(ctx), id, batchRun, settled)
	ids := make([]string, len(settled))
	for i, pc := range settled {
		ids[i] = pc.ToolCallID
	}
	runID := ""
	if len(runs) > 0 {
		runID = runs[0]
	}
	o.log.InfoContext(ctx, "conversation cancelled", slog.String("conversation_id", id), slog.Int("calls", len(ids)))
	o.events.publish(ctx, id, runID, EventConversationCancelled, "", cancelledData{Reason: CancelledMessage, ToolCallIDs: ids})
}

// workingRuns lists the runs of an unfinished conversation that may still
// be working: the paused run whose calls are out, and the run under lease.
func (c *Conversation) workingRuns() []string {
	var runs []string
	if c.Batch != nil && c.Status == StatusPaused {
		runs = append(runs, c.Batch.RunID)
	}
	if c.Lease != nil && c.Lease.RunID != "" && (len(runs) == 0 || runs[0] != c.Lease.RunID) {
		runs = append(runs, c.Lease.RunID)
	}
	return runs
}

// subscribeCancels makes this replica stop its runs of conversations
// cancelled anywhere.
func (rn *runner) subscribeCancels() error {
	sub, err := rn.bus.SubscribeCancels(func(runID string) {
		rn.launchMu.Lock()
		cancel := rn.executing[runID]
		rn.launchMu.Unlock()
		if cancel != nil {
			cancel()
		}
	})
	if err != nil {
		return err
	}
	rn.cancelSub = sub
	return nil
}
