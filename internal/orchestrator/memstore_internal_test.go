package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/toolgate/toolgate/internal/bus"
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
}

type memConv struct {
	c   *Conversation
	seq uint64
}

func newMemStore() *memStore {
	return &memStore{convs: map[string]memConv{}, indexed: map[string]bool{}}
}

func (m *memStore) current(id string) (*Conversation, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mc, ok := m.convs[id]
	if !ok {
		return nil, 0, fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	}
	return mc.c.clone(), mc.seq, nil
}

func (m *memStore) updateFrom(_ context.Context, id string, c *Conversation, seq uint64, fn func(*Conversation) error) (*Conversation, uint64, error) {
	for range maxCASAttempts {
		if c == nil {
			var err error
			if c, seq, err = m.current(id); err != nil {
				return nil, 0, err
			}
		}
		fp := fingerprintOf(c)
		if err := fn(c); err != nil {
			if errors.Is(err, errUnchanged) {
				return c, seq, nil
			}
			return c, seq, err
		}
		if diff(fp, c).empty() {
			return c, seq, nil
		}
		if m.appended != nil {
			m.appended(id)
		}
		m.mu.Lock()
		if mc, ok := m.convs[id]; ok && mc.seq == seq {
			m.seq++
			m.convs[id] = memConv{c: c.clone(), seq: m.seq}
			nseq := m.seq
			m.mu.Unlock()
			return c, nseq, nil
		}
		m.mu.Unlock()
		c = nil
	}
	return nil, 0, fmt.Errorf("update conversation %s: still conflicting after %d attempts", id, maxCASAttempts)
}

func (m *memStore) create(_ context.Context, c *Conversation) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.convs[c.ID]; ok {
		return 0, fmt.Errorf("create conversation %s: %w", c.ID, errExists)
	}
	m.seq++
	m.convs[c.ID] = memConv{c: c.clone(), seq: m.seq}
	return m.seq, nil
}

func (m *memStore) commit(_ context.Context, c *Conversation, _ *fingerprint, seq uint64) (uint64, error) {
	if m.appended != nil {
		m.appended(c.ID)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if mc, ok := m.convs[c.ID]; !ok || mc.seq != seq {
		return 0, fmt.Errorf("commit conversation %s: %w", c.ID, bus.ErrLogConflict)
	}
	m.seq++
	m.convs[c.ID] = memConv{c: c.clone(), seq: m.seq}
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
