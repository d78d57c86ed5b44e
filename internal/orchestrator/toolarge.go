package orchestrator

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/toolgate/toolgate/wire"
)

// A conversation is stored as one value, which must fit NATS's max payload.
// A change that would take it over is never retried (it could only fail
// again, and the conversation would wait forever): a reply group whose
// results do not fit records them as failed results instead, which the
// model sees in its follow-up; a run whose history does not fit fails; any
// other change that does not fit fails the conversation (failTooLarge).

// failTooLarge fails the conversation that a change would have taken over
// the store's limit, with the reason in its status and a run_failed event.
func (co *core) failTooLarge(ctx context.Context, convID string, tl *TooLargeError) {
	reason := tl.Error()
	var runID string
	c, _, err := co.store.updateFrom(ctx, convID, nil, 0, func(c *Conversation) error {
		runID = ""
		if c.Lease != nil {
			runID = c.Lease.RunID
		} else if c.Batch != nil {
			runID = c.Batch.RunID
		}
		if !c.Abort(reason, co.clock()) {
			return errUnchanged
		}
		return nil
	})
	if err != nil {
		co.log.ErrorContext(ctx, "fail a conversation too large to store", slog.String("conversation_id", convID), slog.String("error", err.Error()))
		return
	}
	if c.Status != StatusFailed || c.Error != reason {
		return
	}
	co.log.WarnContext(ctx, "conversation failed: state too large", slog.String("conversation_id", convID), slog.String("error", reason))
	co.events.publish(ctx, convID, runID, EventRunFailed, "", wire.RunFailed{Error: reason})
}

// shrunk is in with a result's value, content and metadata replaced by a
// failed outcome saying why: what a reply becomes when its conversation
// cannot hold it.
func shrunk(in incoming, tl *TooLargeError) incoming {
	if in.result == nil || in.result.Outcome == wire.OutcomeFailed {
		return in
	}
	r := *in.result
	r.Outcome = wire.OutcomeFailed
	r.Message = fmt.Sprintf("result not kept: %d bytes of value and content would take the conversation over the store's limit of %d bytes", len(r.Value)+len(r.Content)+len(r.Metadata), tl.Limit)
	r.Value, r.Content, r.Metadata = nil, "", nil
	in.result = &r
	return in
}
