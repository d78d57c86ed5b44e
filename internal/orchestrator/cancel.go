package orchestrator

import (
	"context"
	"errors"

	"github.com/toolgate/toolgate/internal/conversation"
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
func (o *Orchestrator) Cancel(ctx context.Context, id string) (*conversation.State, error) {
	if o.stopped.Load() {
		return nil, ErrStopped
	}
	c, err := o.fx.doRequest(ctx, id, conversation.CancelTransition(conversation.CancelledMessage))
	if err != nil {
		var ce *conversation.ConflictError
		if errors.As(err, &ce) {
			ce.Op = conversation.OpCancel
		}
		o.storage.failed(err)
		return nil, err
	}
	return c, nil
}
