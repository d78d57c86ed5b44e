package orchestrator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
)

// The store's contract, which the write path relies on, held against each
// implementation: the JetStream logs and memory.
func TestConversationStoreContract(t *testing.T) {
	t.Parallel()
	for _, impl := range []struct {
		name string
		new  func(t *testing.T) (conversationStore, context.Context)
	}{
		{"jetstream", func(t *testing.T) (conversationStore, context.Context) {
			return newTestStore(t, 64<<20), bustest.Context(t)
		}},
		{"memory", func(t *testing.T) (conversationStore, context.Context) {
			return newMemStore(), context.Background()
		}},
	} {
		t.Run(impl.name, func(t *testing.T) {
			t.Parallel()
			conversationStoreSuite(t, impl.new)
		})
	}
}

func conversationStoreSuite(t *testing.T, newStore func(t *testing.T) (conversationStore, context.Context)) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	newConv := func(id string) *conversation.State {
		return conversation.New(id, conversation.RunRecord{RunID: "r1_" + id, Status: conversation.StatusRunning, Prompt: "p", StartedAt: t0},
			&conversation.Lease{Owner: "me", RunID: "r1_" + id, Until: t0.Add(time.Minute)}, t0)
	}
	read := func(t *testing.T, ctx context.Context, s conversationStore, id string) (*conversation.State, uint64) {
		t.Helper()
		c, seq, err := s.updateFrom(ctx, id, nil, 0, func(*conversation.State) error { return conversation.ErrUnchanged })
		if err != nil {
			t.Fatalf("read %s: %v", id, err)
		}
		return c, seq
	}

	t.Run("create once", func(t *testing.T) {
		s, ctx := newStore(t)
		seq, err := s.create(ctx, newConv("c1"))
		if err != nil || seq == 0 {
			t.Fatalf("create: %d, %v", seq, err)
		}
		if _, err := s.create(ctx, newConv("c1")); !errors.Is(err, errExists) {
			t.Errorf("create again: %v, want errExists", err)
		}
		c, got := read(t, ctx, s, "c1")
		if got != seq || c.Status != conversation.StatusRunning || c.Runs[0].Prompt != "p" {
			t.Errorf("read back at %d (want %d): %s", got, seq, c.Status)
		}
	})

	t.Run("unknown", func(t *testing.T) {
		s, ctx := newStore(t)
		if _, _, err := s.updateFrom(ctx, "c404", nil, 0, func(*conversation.State) error { return nil }); !errors.Is(err, ErrNotFound) {
			t.Errorf("update unknown: %v, want ErrNotFound", err)
		}
	})

	t.Run("unchanged and refused write nothing", func(t *testing.T) {
		s, ctx := newStore(t)
		seq, _ := s.create(ctx, newConv("c1"))
		if _, got, err := s.updateFrom(ctx, "c1", nil, 0, func(c *conversation.State) error {
			return c.Renew("someone else", "r1_c1", t0.Add(time.Hour))
		}); !errors.Is(err, conversation.ErrLeaseLost) || got != seq {
			t.Errorf("refused change: at %d, %v; want %d, conversation.ErrLeaseLost", got, err, seq)
		}
		if _, got, err := s.updateFrom(ctx, "c1", nil, 0, func(c *conversation.State) error {
			c.Output = "not kept"
			return conversation.ErrUnchanged
		}); err != nil || got != seq {
			t.Errorf("unchanged: at %d, %v; want %d", got, err, seq)
		}
		if c, got := read(t, ctx, s, "c1"); got != seq || c.Output != "" || c.Lease.Until != t0.Add(time.Minute) {
			t.Errorf("after nothing was written: at %d, output %q, lease until %s", got, c.Output, c.Lease.Until)
		}
	})

	t.Run("a stale writer catches up and applies again", func(t *testing.T) {
		s, ctx := newStore(t)
		seq, _ := s.create(ctx, newConv("c1"))
		stale, _ := read(t, ctx, s, "c1")
		_, seq2, err := s.updateFrom(ctx, "c1", nil, 0, func(c *conversation.State) error {
			return c.Renew("me", "r1_c1", t0.Add(time.Hour))
		})
		if err != nil || seq2 <= seq {
			t.Fatalf("renew: at %d, %v", seq2, err)
		}
		var applied []time.Time
		c, seq3, err := s.updateFrom(ctx, "c1", stale, seq, func(c *conversation.State) error {
			applied = append(applied, c.Lease.Until)
			return c.Complete("me", "r1_c1", nil, "out", t0.Add(2*time.Minute))
		})
		if err != nil || seq3 <= seq2 {
			t.Fatalf("complete from the stale state: at %d, %v", seq3, err)
		}
		if len(applied) != 2 || !applied[0].Equal(t0.Add(time.Minute)) || !applied[1].Equal(t0.Add(time.Hour)) {
			t.Errorf("applied to leases until %v; want the stale one, then the renewed one", applied)
		}
		if c.Status != conversation.StatusCompleted {
			t.Errorf("returned %s, want completed", c.Status)
		}
		if got, at := read(t, ctx, s, "c1"); at != seq3 || got.Status != conversation.StatusCompleted || got.Output != "out" {
			t.Errorf("read back at %d (want %d): %s %q", at, seq3, got.Status, got.Output)
		}
	})

	t.Run("commit only at the sequence it was made from", func(t *testing.T) {
		s, ctx := newStore(t)
		seq, _ := s.create(ctx, newConv("c1"))
		base, _ := read(t, ctx, s, "c1")
		ahead := base.Clone()
		if err := ahead.Complete("me", "r1_c1", nil, "out", t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		seq2, err := s.commit(ctx, ahead, conversation.FingerprintOf(base), seq)
		if err != nil || seq2 <= seq {
			t.Fatalf("commit at %d: %d, %v", seq, seq2, err)
		}
		if got, at := read(t, ctx, s, "c1"); at != seq2 || got.Status != conversation.StatusCompleted || got.Output != "out" {
			t.Errorf("read back at %d (want %d): %s %q", at, seq2, got.Status, got.Output)
		}
		stale := base.Clone()
		stale.Output = "stale"
		if _, err := s.commit(ctx, stale, conversation.FingerprintOf(base), seq); err == nil {
			t.Error("a commit from a sequence the log has passed was stored")
		}
		if got, at := read(t, ctx, s, "c1"); at != seq2 || got.Output != "out" {
			t.Errorf("after a stale commit: at %d (want %d), output %q", at, seq2, got.Output)
		}
	})

	t.Run("delete leaves a tombstone", func(t *testing.T) {
		s, ctx := newStore(t)
		if _, err := s.create(ctx, newConv("c1")); err != nil {
			t.Fatal(err)
		}
		calls := 0
		del := func(c *conversation.State) error { calls++; return c.Delete(t0.Add(time.Hour)) }
		var ce *conversation.ConflictError
		if _, err := s.delete(ctx, "c1", del); !errors.As(err, &ce) {
			t.Errorf("delete running: %v, want a *ConflictError", err)
		}
		if _, _, err := s.updateFrom(ctx, "c1", nil, 0, func(c *conversation.State) error {
			return c.Complete("me", "r1_c1", nil, "out", t0.Add(time.Minute))
		}); err != nil {
			t.Fatal(err)
		}
		tomb, err := s.delete(ctx, "c1", del)
		if err != nil || tomb.Status != conversation.StatusDeleted || tomb.Output != "" {
			t.Fatalf("delete completed: %s, %v; want the tombstone", describeState(tomb), err)
		}
		if err := s.purge(ctx, "c1", 1); err != nil {
			t.Fatalf("purge to the tombstone: %v", err)
		}
		calls = 0
		if _, err := s.delete(ctx, "c1", del); !errors.Is(err, errDeleted) || calls != 0 {
			t.Errorf("delete deleted: %v after %d calls of fn; want errDeleted, none", err, calls)
		}
		if _, _, err := s.updateFrom(ctx, "c1", nil, 0, func(*conversation.State) error { return nil }); !errors.Is(err, errDeleted) {
			t.Errorf("update deleted: %v, want errDeleted", err)
		}
		if _, err := s.delete(ctx, "c404", del); !errors.Is(err, ErrNotFound) || errors.Is(err, errDeleted) {
			t.Errorf("delete unknown: %v, want ErrNotFound", err)
		}
	})

	t.Run("index", func(t *testing.T) {
		s, ctx := newStore(t)
		if _, err := s.create(ctx, newConv("c1")); err != nil {
			t.Fatal(err)
		}
		if err := s.indexNow(ctx, "c1"); err != nil {
			t.Errorf("index: %v", err)
		}
	})
}
