package orchestrator

import (
	"context"
	"fmt"
	"iter"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// StoredEvent is an event read back from TOOLGATE_EVENTS with its place
// there (bus.StoredEvent).
type StoredEvent = bus.StoredEvent

// Events yields the events of conversation id stored after sequence
// afterSeq (0: from the oldest kept), then new ones as they come, until ctx
// ends, the caller stops or the orchestrator stops. An id that cannot name
// a conversation yields ErrNotFound.
func (o *Orchestrator) Events(ctx context.Context, id string, afterSeq uint64) iter.Seq2[StoredEvent, error] {
	return func(yield func(StoredEvent, error) bool) {
		if _, err := wire.EventSubject(id); err != nil {
			yield(StoredEvent{}, fmt.Errorf("conversation %s: %w", id, ErrNotFound))
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-o.stopping:
				cancel()
			case <-ctx.Done():
			}
		}()
		for se, err := range o.bus.Events(ctx, id, afterSeq) {
			if !yield(se, err) {
				return
			}
		}
	}
}

// LastEventSeq is the sequence of the last event stored, of any
// conversation: Events after it yields only what comes next, so that a
// reader can follow what a request it is about to make causes.
func (o *Orchestrator) LastEventSeq(ctx context.Context) (uint64, error) {
	return o.bus.LastSequence(ctx, wire.StreamEvents)
}
