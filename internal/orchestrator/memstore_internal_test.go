package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
)

// memStore keeps conversations in memory under the store's contract
// (conversationStore): for tests of the write path that need a store and
// nothing of JetStream. Every change is one step of a sequence shared by
// all conversations, as a stream's is.
type memStore struct {
	mu      sync.Mutex
	seq     uint64
	convs   map[string]memConv
	indexed map[string]bool
	// appended, when set, is called before each append is checked, with
	// the store unlocked: a test's way to write in between.
	appended func(id string)
	// purged, when set, is told of each purge, and fails it with what it
	// returns.
	purged func(id string, keep uint64) error
}

type memConv struct {
	c   *conversation.State
	seq uint64
}

func newMemStore() *memStore {
	return &memStore{convs: map[string]memConv{}, indexed: map[string]bool{}}
}

func (m *memStore) current(id string) (*conversation.State, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mc, ok := m.convs[id]
	if !ok {
		return nil, 0, fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	}
	if mc.c.Status == conversation.StatusDeleted {
		return nil, 0, fmt.Errorf("conversation %s: %w", id, errDeleted)
	}
	return mc.c.Clone(), mc.seq, nil
}

func (m *memStore) updateFrom(_ context.Context, id string, c *conversation.State, seq uint64, fn func(*conversation.State) error) (*conversation.State, uint64, error) {
	for range maxCASAttempts {
		if c == nil {
			var err error
			if c, seq, err = m.current(id); err != nil {
				return nil, 0, err
			}
		}
		fp := conversation.FingerprintOf(c)
		if err := fn(c); err != nil {
			if errors.Is(err, conversation.ErrUnchanged) {
				return c, seq, nil
			}
			return c, seq, err
		}
		if conversation.Diff(fp, c).Empty() {
			return c, seq, nil
		}
		if m.appended != nil {
			m.appended(id)
		}
		m.mu.Lock()
		if mc, ok := m.convs[id]; ok && mc.seq == seq {
			m.seq++
			m.convs[id] = memConv{c: c.Clone(), seq: m.seq}
			nseq := m.seq
			m.mu.Unlock()
			return c, nseq, nil
		}
		m.mu.Unlock()
		c = nil
	}
	return nil, 0, fmt.Errorf("update conversation %s: still conflicting after %d attempts", id, maxCASAttempts)
}

func (m *memStore) create(_ context.Context, c *conversation.State) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.convs[c.ID]; ok {
		return 0, fmt.Errorf("create conversation %s: %w", c.ID, errExists)
	}
	m.seq++
	m.convs[c.ID] = memConv{c: c.Clone(), seq: m.seq}
	return m.seq, nil
}

func (m *memStore) commit(_ context.Context, c *conversation.State, _ *conversation.Fingerprint, seq uint64) (uint64, error) {
	if m.appended != nil {
		m.appended(c.ID)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if mc, ok := m.convs[c.ID]; !ok || mc.seq != seq {
		return 0, fmt.Errorf("commit conversation %s: %w", c.ID, bus.ErrLogConflict)
	}
	m.seq++
	m.convs[c.ID] = memConv{c: c.Clone(), seq: m.seq}
	return m.seq, nil
}

func (m *memStore) indexNow(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.indexed[id] = true
	return nil
}

// followUpRequest has nothing to follow up: a memory append's outcome is
// always known.
func (m *memStore) followUpRequest(context.Context, string, func(func()), error, func()) {}

func (m *memStore) delete(ctx context.Context, id string, fn func(*conversation.State) error) (*conversation.State, error) {
	c, _, err := m.updateFrom(ctx, id, nil, 0, fn)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// purge keeps the conversation's state, which is its last record: a
// memory log has no records before it to remove.
func (m *memStore) purge(_ context.Context, id string, keep uint64) error {
	if m.purged != nil {
		return m.purged(id, keep)
	}
	return nil
}
