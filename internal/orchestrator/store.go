package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"
)

// Keys of KV toolgate_runs.
const (
	convKeyPrefix = "conv."
	runKeyPrefix  = "run."
)

// ErrNotFound is returned for a conversation or run that does not exist.
var ErrNotFound = errors.New("not found")

// errUnchanged, returned by an update function, ends the update without a
// write.
var errUnchanged = errors.New("unchanged")

// maxCASAttempts bounds the re-read-and-retry loop of one update; reaching it
// means a pathological contention on one key.
const maxCASAttempts = 64

// TooLargeError says a conversation's state would not fit in one stored
// value (NATS's max payload); nothing was written.
type TooLargeError struct {
	ConversationID string
	Bytes, Limit   int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("conversation %s: its state would be %d bytes, over the store's limit of %d (the server's max payload)", e.ConversationID, e.Bytes, e.Limit)
}

// tooLarge returns the TooLargeError in err, if any.
func tooLarge(err error) *TooLargeError {
	var e *TooLargeError
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// valueHeadroom is kept below the max payload for the KV message's headers.
const valueHeadroom = 1 << 10

// store keeps conversations in KV, one key each, updated by revision (CAS).
type store struct {
	kv   jetstream.KeyValue
	runs runCache
	// maxValue is the largest state a write may carry; 0 leaves the check
	// to the server.
	maxValue int
	// onTooLarge is told of a write update refused as too large, so that
	// the conversation fails visibly instead of waiting for a write that
	// can never succeed.
	onTooLarge func(ctx context.Context, id string, err *TooLargeError)
	// writes and bytes count what this process wrote to KV (the store's
	// share of the cost of a conversation), for Stats.
	writes, bytes *atomic.Int64
}

func (s *store) wrote(n int) {
	if s.writes != nil {
		s.writes.Add(1)
		s.bytes.Add(int64(n))
	}
}

// runCacheMax bounds the run → conversation cache: enough for the runs in
// flight, a fixed cost however many conversations are paused.
const runCacheMax = 8192

// runCache remembers which conversation recent runs belong to, saving a KV
// read per reply; the mapping never changes once written, so an entry is
// never stale. When full, an arbitrary entry makes room.
type runCache struct {
	mu sync.Mutex
	m  map[string]string
}

func (rc *runCache) get(runID string) (string, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	id, ok := rc.m[runID]
	return id, ok
}

func (rc *runCache) add(runID, convID string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.m == nil {
		rc.m = make(map[string]string)
	}
	if _, ok := rc.m[runID]; !ok && len(rc.m) >= runCacheMax {
		for k := range rc.m {
			delete(rc.m, k)
			break
		}
	}
	rc.m[runID] = convID
}

func convKey(id string) string { return convKeyPrefix + id }
func runKey(id string) string  { return runKeyPrefix + id }

func encodeState(v any) ([]byte, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode state: %w", err)
	}
	return b, nil
}

func (s *store) get(ctx context.Context, id string) (*Conversation, uint64, error) {
	e, err := s.kv.Get(ctx, convKey(id))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
			return nil, 0, fmt.Errorf("conversation %s: %w", id, ErrNotFound)
		}
		return nil, 0, fmt.Errorf("get conversation %s: %w", id, err)
	}
	var c Conversation
	if err := msgpack.Unmarshal(e.Value(), &c); err != nil {
		return nil, 0, fmt.Errorf("decode conversation %s: %w", id, err)
	}
	return &c, e.Revision(), nil
}

// create stores a new conversation; it fails if the id is taken.
func (s *store) create(ctx context.Context, c *Conversation) (uint64, error) {
	b, err := encodeState(c)
	if err != nil {
		return 0, err
	}
	if err := s.fits(c.ID, b, nil); err != nil {
		return 0, err
	}
	rev, err := s.kv.Create(ctx, convKey(c.ID), b)
	s.wrote(len(b))
	if err != nil {
		return 0, fmt.Errorf("create conversation %s: %w", c.ID, err)
	}
	return rev, nil
}

// update applies fn to the stored conversation and writes it back if the
// revision has not moved; on a conflict it re-reads and applies fn again, so
// fn must be a pure function of the state it is given. fn returning
// errUnchanged ends without a write (update returns the state and nil); any
// other error ends it with that error.
//
// A change that would make the state too large fails the conversation
// (onTooLarge) and returns the *TooLargeError.
func (s *store) update(ctx context.Context, id string, fn func(*Conversation) error) (*Conversation, error) {
	c, _, err := s.updateFrom(ctx, id, nil, 0, fn)
	if e := tooLarge(err); e != nil && s.onTooLarge != nil {
		s.onTooLarge(ctx, id, e)
	}
	return c, err
}

// fits refuses a value over maxValue, or one the server refused as over its
// max payload (werr), as a *TooLargeError.
func (s *store) fits(id string, b []byte, werr error) error {
	if s.maxValue > 0 && len(b) > s.maxValue {
		return &TooLargeError{ConversationID: id, Bytes: len(b), Limit: s.maxValue}
	}
	if errors.Is(werr, nats.ErrMaxPayload) {
		return &TooLargeError{ConversationID: id, Bytes: len(b), Limit: s.maxValue}
	}
	return nil
}

// updateFrom is update starting from a state the caller read (or wrote) at
// revision rev, which saves the read when nothing changed since; c is the
// caller's to give away. A nil c reads first. It also returns the revision
// of the state it returns.
func (s *store) updateFrom(ctx context.Context, id string, c *Conversation, rev uint64, fn func(*Conversation) error) (*Conversation, uint64, error) {
	for range maxCASAttempts {
		if c == nil {
			var err error
			if c, rev, err = s.get(ctx, id); err != nil {
				return nil, 0, err
			}
		}
		if err := fn(c); err != nil {
			if errors.Is(err, errUnchanged) {
				return c, rev, nil
			}
			return c, rev, err
		}
		b, err := encodeState(c)
		if err != nil {
			return nil, 0, err
		}
		if err := s.fits(id, b, nil); err != nil {
			return nil, 0, err
		}
		nrev, err := s.kv.Update(ctx, convKey(id), b, rev)
		s.wrote(len(b))
		if err == nil {
			return c, nrev, nil
		}
		if err := s.fits(id, b, err); err != nil {
			return nil, 0, err
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return nil, 0, fmt.Errorf("update conversation %s: %w", id, err)
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		c = nil
	}
	return nil, 0, fmt.Errorf("update conversation %s: still conflicting after %d attempts", id, maxCASAttempts)
}

// putRun records which conversation a run belongs to. Run ids are fresh, so
// an existing key holding the same conversation is a retry and fine.
func (s *store) putRun(ctx context.Context, runID, convID string) error {
	if convOfRunID(runID) == convID {
		// The id names its conversation: no entry needed.
		return nil
	}
	b, err := encodeState(runIndex{ConversationID: convID})
	if err != nil {
		return err
	}
	_, err = s.kv.Create(ctx, runKey(runID), b)
	s.wrote(len(b))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			got, gerr := s.conversationOf(ctx, runID)
			if gerr == nil && got == convID {
				return nil
			}
		}
		return fmt.Errorf("index run %s: %w", runID, err)
	}
	s.runs.add(runID, convID)
	return nil
}

// indexed reports whether this process wrote or read the run's index
// holding convID, so that putRun can be skipped.
func (s *store) indexed(runID, convID string) bool {
	if convOfRunID(runID) == convID {
		return true
	}
	got, ok := s.runs.get(runID)
	return ok && got == convID
}

// conversationOf returns the conversation a run belongs to.
func (s *store) conversationOf(ctx context.Context, runID string) (string, error) {
	if conv := convOfRunID(runID); conv != "" {
		return conv, nil
	}
	if id, ok := s.runs.get(runID); ok {
		return id, nil
	}
	e, err := s.kv.Get(ctx, runKey(runID))
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrInvalidKey) {
			return "", fmt.Errorf("run %s: %w", runID, ErrNotFound)
		}
		return "", fmt.Errorf("get run %s: %w", runID, err)
	}
	var ri runIndex
	if err := msgpack.Unmarshal(e.Value(), &ri); err != nil {
		return "", fmt.Errorf("decode run %s: %w", runID, err)
	}
	s.runs.add(runID, ri.ConversationID)
	return ri.ConversationID, nil
}

// conversationIDs lists every stored conversation.
func (s *store) conversationIDs(ctx context.Context) ([]string, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, convKeyPrefix+">")
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("list conversations: %w", err)
	}
	defer lister.Stop()
	var ids []string
	for k := range lister.Keys() {
		ids = append(ids, strings.TrimPrefix(k, convKeyPrefix))
	}
	return ids, nil
}
