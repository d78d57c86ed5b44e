package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/vmihailenco/msgpack/v5"
)

// Conversations stored by an earlier build are one value each, key
// conv.<id> of bucket toolgate_runs, with run.<run id> entries for run ids
// that name no conversation. Each is moved into a log once: its state
// becomes the log's first record, and the value is deleted. The run index
// stays, read-only, for replies to those runs.

const (
	legacyConvPrefix = "conv."
	legacyRunPrefix  = "run."
)

func legacyConvKey(id string) string   { return legacyConvPrefix + id }
func legacyRunKey(runID string) string { return legacyRunPrefix + runID }

// legacyRunIndex is the value of key run.<run_id>.
type legacyRunIndex struct {
	ConversationID string `msgpack:"conversation_id"`
}

// migrate moves every conversation of the earlier store into its log; it
// returns how many it moved.
func (s *store) migrate(ctx context.Context, log *slog.Logger) (int, error) {
	if s.legacy == nil {
		return 0, nil
	}
	stored, err := s.legacy.List(ctx, legacyConvPrefix+">", false)
	if err != nil {
		return 0, fmt.Errorf("list stored conversations: %w", err)
	}
	var ids []string
	for _, e := range stored {
		ids = append(ids, strings.TrimPrefix(e.Key, legacyConvPrefix))
	}
	moved := 0
	var errs []error
	for _, id := range ids {
		ok, err := s.migrateOne(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			moved++
		}
	}
	if moved > 0 {
		log.InfoContext(ctx, "conversations moved into logs", slog.Int("conversations", moved))
	}
	return moved, errors.Join(errs...)
}

// migrateOne moves conversation id from the earlier store into its log, if
// it is there; it reports whether the conversation is now in its log.
func (s *store) migrateOne(ctx context.Context, id string) (bool, error) {
	if s.legacy == nil {
		return false, nil
	}
	e, err := s.legacy.Get(ctx, legacyConvKey(id))
	if err != nil {
		if errors.Is(err, bus.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
			return false, nil
		}
		return false, fmt.Errorf("read stored conversation %s: %w", id, err)
	}
	var c conversation.State
	if err := msgpack.Unmarshal(e.Value, &c); err != nil {
		return false, fmt.Errorf("decode stored conversation %s: %w", id, err)
	}
	if c.ID == "" {
		c.ID = id
	}
	seq, n, err := s.append(ctx, &c, 0, conversation.FullRecord(&c))
	switch {
	case err == nil:
		s.cache.put(id, c.Clone(), seq, int64(n))
	case conflict(err):
		// Moved already, by another replica or an earlier attempt.
	default:
		return false, fmt.Errorf("move conversation %s into its log: %w", id, err)
	}
	if !c.Status.Terminal() {
		if _, err := s.markDue(ctx, id); err != nil {
			return false, fmt.Errorf("move conversation %s: index: %w", id, err)
		}
	}
	if err := s.legacy.Delete(ctx, legacyConvKey(id), e.Revision); err != nil && !errors.Is(err, bus.ErrRevisionMismatch) {
		return true, fmt.Errorf("move conversation %s: delete the stored value: %w", id, err)
	}
	return true, nil
}
