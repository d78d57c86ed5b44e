package approver

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// StoredRequest is an approval request read back from TOOLGATE_APPROVALS.
type StoredRequest struct {
	Request wire.ApprovalRequest
	Seq     uint64
	Time    time.Time // when the stream stored it
}

// ScanApprovals reads the approval requests stored in TOOLGATE_APPROVALS
// under filter (wire.AllApprovals when empty), oldest first, up to the end
// of the stream as it was when the scan began. Requests that cannot be
// decoded are skipped: a reader is not their owner. It needs no durable
// consumer, so one-shot commands leave no state behind.
func ScanApprovals(ctx context.Context, b *bus.Bus, filter string) ([]StoredRequest, error) {
	if filter == "" {
		filter = wire.AllApprovals
	}
	var out []StoredRequest
	err := scan(ctx, b, wire.StreamApprovals, filter, func(m jetstream.Msg, meta *jetstream.MsgMetadata) {
		var r wire.ApprovalRequest
		if err := wire.Decode(m.Data(), m.Headers().Get(wire.HeaderContentType), &r); err != nil {
			return
		}
		if r.Validate() != nil {
			return
		}
		out = append(out, StoredRequest{Request: r, Seq: meta.Sequence.Stream, Time: meta.Timestamp})
	})
	if err != nil {
		return nil, fmt.Errorf("scan approvals: %w", err)
	}
	return out, nil
}

// ScanEvents reads the stored events of one conversation ("" for every
// conversation), oldest first, up to the end of the stream as it was when
// the scan began.
func ScanEvents(ctx context.Context, b *bus.Bus, conversationID string) ([]bus.StoredEvent, error) {
	filter := wire.AllEvents
	if conversationID != "" {
		var err error
		if filter, err = wire.EventSubject(conversationID); err != nil {
			return nil, fmt.Errorf("scan events: %w", err)
		}
	}
	var out []bus.StoredEvent
	err := scan(ctx, b, wire.StreamEvents, filter, func(m jetstream.Msg, meta *jetstream.MsgMetadata) {
		events, err := bus.DecodeEvents(m.Data(), m.Headers())
		if err != nil {
			return
		}
		for i, e := range events {
			out = append(out, bus.StoredEvent{Event: e, Seq: meta.Sequence.Stream, Index: i, Time: meta.Timestamp})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("scan events: %w", err)
	}
	return out, nil
}

// ConversationEvents is ScanEvents without the stream positions: the
// events of one conversation, oldest first.
func ConversationEvents(ctx context.Context, b *bus.Bus, conversationID string) ([]wire.Event, error) {
	stored, err := ScanEvents(ctx, b, conversationID)
	if err != nil {
		return nil, err
	}
	out := make([]wire.Event, 0, len(stored))
	for _, se := range stored {
		out = append(out, se.Event)
	}
	return out, nil
}

// scan feeds fn every message of stream under filter up to the stream's
// last when the scan began (bus.ScanStream): a message removed meanwhile,
// such as the events of a conversation deleted during the scan, is left
// out rather than waited for. An approver may delete its consumers of the
// events stream but not those of the approvals stream, where the bots'
// durables are: there the scan's consumer expires by itself.
func scan(ctx context.Context, b *bus.Bus, stream, filter string, fn func(jetstream.Msg, *jetstream.MsgMetadata)) error {
	return b.ScanStream(ctx, stream, filter, stream != wire.StreamEvents, fn)
}
