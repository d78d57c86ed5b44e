package bus

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// StoredEvent is an event read back from TOOLGATE_EVENTS; Seq orders a
// conversation's events and lets a reader resume (e.g. SSE Last-Event-ID).
type StoredEvent struct {
	Event wire.Event
	Seq   uint64
	// Index is the event's place in its message: 0, or its position in an
	// EventBatch.
	Index int
	Time  time.Time
}

// Events yields the events of one conversation ("" for all) stored after
// sequence afterSeq (0: from the oldest kept), then new ones as they come,
// until ctx ends or the caller stops. Events that cannot be decoded are
// skipped: readers of events are observers, not owners. It reads through an
// ordered consumer, so it needs no durable state and may run anywhere; the
// consumer is deleted when the reading ends (see DropOrdered).
func (b *Bus) Events(ctx context.Context, conversationID string, afterSeq uint64) iter.Seq2[StoredEvent, error] {
	return func(yield func(StoredEvent, error) bool) {
		filter := wire.AllEvents
		if conversationID != "" {
			var err error
			if filter, err = wire.EventSubject(conversationID); err != nil {
				yield(StoredEvent{}, fmt.Errorf("events: %w", err))
				return
			}
		}
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy}
		if afterSeq > 0 {
			cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			cfg.OptStartSeq = afterSeq + 1
		}
		cons, err := b.js.OrderedConsumer(ctx, wire.StreamEvents, cfg)
		if err != nil {
			yield(StoredEvent{}, fmt.Errorf("events: %w", errNotSetUp(err)))
			return
		}
		it, err := cons.Messages()
		if err != nil {
			yield(StoredEvent{}, fmt.Errorf("events: %w", err))
			return
		}
		stop := context.AfterFunc(ctx, it.Stop)
		defer func() {
			stop()
			it.Stop()
			b.DropOrdered(ctx, wire.StreamEvents, cons)
		}()
		for {
			m, err := it.Next()
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			if err != nil {
				if !yield(StoredEvent{}, fmt.Errorf("events: %w", err)) {
					return
				}
				continue
			}
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			events, err := DecodeEvents(m.Data(), m.Headers())
			if err != nil {
				b.logger.WarnContext(ctx, "skipping undecodable event", "stream_seq", meta.Sequence.Stream, "error", err)
				continue
			}
			for i, e := range events {
				if !yield(StoredEvent{Event: e, Seq: meta.Sequence.Stream, Index: i, Time: meta.Timestamp}, nil) {
					return
				}
			}
		}
	}
}

// DropOrdered deletes the server-side consumer of an ordered consumer whose
// reading has ended. nats.go leaves it to its inactivity threshold (5
// minutes), so every closed event stream or scan would otherwise keep one
// there that long: hundreds of short reads pile up as many consumers. A
// failure is only logged; the threshold still removes it.
func (b *Bus) DropOrdered(ctx context.Context, stream string, c jetstream.Consumer) {
	info := c.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := b.js.DeleteConsumer(ctx, stream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) && !errors.Is(err, nats.ErrConnectionClosed) {
		b.logger.WarnContext(ctx, "deleting a finished reader's consumer", "stream", stream, "consumer", info.Name, "error", err)
	}
}
