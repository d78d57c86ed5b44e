package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
)

// A conversation whose log cannot be read (CorruptError) cannot be deleted
// the usual way, which reads it to check that it is finished. DeleteCorrupt
// is the operator's way out: allowed only while reading the log from its
// start fails, it removes what there is and says so in the audit stream.

// AuditKindConversation is the kind of the audit record of a corrupt
// conversation's delete; its RunID is the conversation id, since no run of
// it can be read.
const AuditKindConversation = "conversation"

// DeleteCorrupt removes a conversation whose log cannot be read: its log
// (replaced by a tombstone, as Delete leaves), its due entry and its
// events; an audit record keeps why. A conversation that can be read is
// refused (*ConflictError): Delete it, finished or not as Delete requires.
// Whatever state it was in is lost: pending calls answered later are
// refused as for any deleted conversation.
func (o *Orchestrator) DeleteCorrupt(ctx context.Context, id string) error {
	if !ValidID(id) {
		return fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	}
	ctx = answersRequest(ctx)
	// From the start, not from the cache: a state cached before the damage
	// would hide it.
	c := &Conversation{}
	_, last, err := o.store.fold(ctx, id, c, 0)
	var corrupt *CorruptError
	switch {
	case errors.As(err, &corrupt):
	case err != nil:
		return err
	case last == 0:
		return fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	case c.Status == StatusDeleted:
		return fmt.Errorf("conversation %s: %w", id, errDeleted)
	default:
		return &ConflictError{ConversationID: id, Status: c.Status, Op: opDelCorrupt}
	}
	if err := o.store.dropLog(ctx, id); err != nil {
		return err
	}
	if err := o.events.purge(ctx, id); err != nil {
		return fmt.Errorf("delete conversation %s: its events: %w", id, err)
	}
	rec := AuditRecord{
		Kind: AuditKindConversation, Verdict: "deleted", Reason: "corrupt: " + corrupt.Error(),
		ConversationID: id, RunID: id, Time: o.clock().UTC(),
	}
	hdr := nats.Header{}
	hdr.Set(bus.HeaderConversation, id)
	if _, err := o.bus.PublishAudit(ctx, id, "audit/conversation/"+id+"/"+rec.Time.Format(time.RFC3339Nano), rec, hdr); err != nil {
		return fmt.Errorf("conversation %s deleted, but its audit record was not written: %w", id, err)
	}
	o.log.WarnContext(ctx, "corrupt conversation deleted", slog.String("conversation_id", id), slog.String("error", corrupt.Error()))
	return nil
}

// dropLog replaces the log of id with a tombstone and removes its due
// entry: for a log that cannot be read (DeleteCorrupt), and for one whose
// tombstone cannot be appended for want of room (store.delete), since the
// purge frees the room the tombstone needs. The tombstone is the log's
// first record again (purge, then append expecting an empty log), so a
// replica that still caches the conversation finds it deleted when its
// next append is refused; if another write came between purge and append,
// the purge is repeated.
func (s *store) dropLog(ctx context.Context, id string) error {
	subj := bus.ConversationSubject(id)
	now := s.clock()
	tomb := &Conversation{ID: id, Status: StatusDeleted, CreatedAt: now, UpdatedAt: now}
	for range maxCASAttempts {
		pctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
		err := s.bus.PurgeLog(pctx, bus.StreamConversations, subj, 0)
		cancel()
		if err != nil {
			return fmt.Errorf("delete conversation %s: %w", id, err)
		}
		seq, n, err := s.append(ctx, tomb, 0, fullRecord(tomb))
		if conflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("delete conversation %s: tombstone: %w", id, err)
		}
		s.cache.put(id, tomb.clone(), seq, int64(n))
		dctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
		defer cancel()
		if err := s.index.PurgeUpTo(dctx, dueKey(id), 0); err != nil {
			return fmt.Errorf("delete conversation %s: index: %w", id, err)
		}
		return nil
	}
	return fmt.Errorf("delete conversation %s: written to %d times while being deleted", id, maxCASAttempts)
}
