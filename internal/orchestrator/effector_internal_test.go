package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
)

// fakeEffects records what the effector carries out, in order.
type fakeEffects struct {
	mu   sync.Mutex
	done []string
}

func (f *fakeEffects) add(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = append(f.done, s)
}

func (f *fakeEffects) list() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.done)
}

func (f *fakeEffects) publish(_ context.Context, _, runID, typ, _ string, _ any) {
	f.add("event " + typ + " " + runID)
}

func (f *fakeEffects) runBegan(_, runID string, deferred bool) {
	if deferred {
		f.add("defer events " + runID)
	}
}
func (f *fakeEffects) runEnded(_, runID string)  {}
func (f *fakeEffects) settleRun(_, runID string) { f.add("settle events " + runID) }
func (f *fakeEffects) dropRun(_, runID string)   { f.add("drop events " + runID) }
func (f *fakeEffects) awaitReplies(string)       { f.add("await replies") }
func (f *fakeEffects) purge(_ context.Context, convID string) error {
	f.add("purge events " + convID)
	return nil
}

// newTestEffector is an effector on a memory store whose collaborators
// record what they are asked for in f.
func newTestEffector(s *memStore, f *fakeEffects, now time.Time) *effector {
	return newEffector(effectorParams{
		log: slog.New(slog.DiscardHandler), clock: func() time.Time { return now }, store: s, events: f,
		deadlines: newDeadlineIndex(), observer: &Counts{},
		owner: "me", leaseTTL: time.Minute, newID: func() string { return "2" }, mine: func(*conversation.State) bool { return true },
		notifyCancel: func(runID string) error { f.add("notice " + runID); return nil },
		withdraw: func(_ context.Context, _, runID string, calls []*conversation.PendingCall) {
			ids := make([]string, len(calls))
			for i, pc := range calls {
				ids[i] = pc.ToolCallID
			}
			f.add("withdraw " + runID + " " + strings.Join(ids, ","))
		},
		escalate: func(_ context.Context, _ *conversation.State, pc *conversation.PendingCall) {
			f.add("escalate " + pc.ToolCallID)
		},
		batchDone: func(_, runID string) { f.add("batchDone " + runID) },
		launch: func(_, runID string, c *conversation.State, _ uint64, _ *deferredAppend, hooks runHooks) {
			f.add("launch " + runID + " from " + string(c.Status))
		},
		handOver: func(_ context.Context, c *conversation.State) { f.add("handOver " + c.ID) },
		spawn:    func(fn func()) { fn() },
		track:    func(fn func()) { fn() },
	})
}

// The effects carried out are those of the write that won, once: a write
// retried after another came first computes them again from the fresher
// state, and one that is refused carries out none.
func TestEffectorCarriesOutTheWinningWriteOnly(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx := context.Background()
	s := newMemStore()
	f := &fakeEffects{}
	e := newTestEffector(s, f, now)
	if _, err := s.create(ctx, conversation.New("c1", conversation.RunRecord{RunID: "r1_c1", Status: conversation.StatusRunning, StartedAt: now},
		&conversation.Lease{Owner: "me", RunID: "r1_c1", Until: now.Add(time.Minute)}, now)); err != nil {
		t.Fatal(err)
	}
	// Another writer comes between the first attempt and its append.
	came := false
	s.appended = func(id string) {
		if came {
			return
		}
		came = true
		if _, _, err := s.updateFrom(ctx, id, nil, 0, func(c *conversation.State) error {
			return c.Renew("me", "r1_c1", now.Add(time.Hour))
		}); err != nil {
			t.Error(err)
		}
	}
	attempts := 0
	_, _, err := e.do(ctx, "c1", func(c *conversation.State, now time.Time) ([]conversation.Effect, error) {
		attempts++
		c.Output = "x"
		return []conversation.Effect{conversation.EmitEffect(c.Lease.Until.Format("15:04"), "attempt", "", nil)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.list(), []string{"event attempt 04:04"}; attempts != 2 || !slices.Equal(got, want) {
		t.Errorf("after %d attempts carried out %q, want %q (the second's, from the renewed lease)", attempts, got, want)
	}

	s.appended = nil
	if _, _, err := e.do(ctx, "c1", func(c *conversation.State, _ time.Time) ([]conversation.Effect, error) {
		return []conversation.Effect{conversation.EmitEffect("r", "refused", "", nil)}, conversation.ErrLeaseLost
	}); err != conversation.ErrLeaseLost {
		t.Errorf("refused transition: %v, want conversation.ErrLeaseLost", err)
	}
	if got := f.list(); len(got) != 1 {
		t.Errorf("a refused transition carried out %q", got[1:])
	}
}

// A cancel of a paused conversation, and an expiry that completes a batch,
// through the effector on a memory store: what each asks for is done, in
// order, down to the follow-up's launch, without a server.
func TestEffectorCancelAndExpiry(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx := context.Background()
	paused := func(s *memStore, id string, deadline time.Time) {
		c := conversation.New(id, conversation.RunRecord{RunID: "r1_" + id, Status: conversation.StatusRunning, StartedAt: now},
			&conversation.Lease{Owner: "me", RunID: "r1_" + id, Until: now.Add(time.Minute)}, now)
		if err := c.Pause("me", "r1_"+id, nil, &conversation.Batch{RunID: "r1_" + id, Calls: []*conversation.PendingCall{
			{ToolCallID: "a", ToolName: "t", Kind: deferred.KindCall, Deadline: deadline},
		}}, now); err != nil {
			t.Fatal(err)
		}
		if _, err := s.create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}

	s, f := newMemStore(), &fakeEffects{}
	e := newTestEffector(s, f, now)
	paused(s, "c1", now.Add(time.Hour))
	c, err := e.doRequest(ctx, "c1", conversation.CancelTransition(conversation.CancelledMessage))
	if err != nil || c.Status != conversation.StatusCancelled {
		t.Fatalf("cancel: %v, %v", describeState(c), err)
	}
	if got, want := f.list(), []string{"notice r1_c1", "withdraw r1_c1 a", "event conversation_cancelled r1_c1"}; !slices.Equal(got, want) {
		t.Errorf("cancel carried out %q, want %q", got, want)
	}

	s, f = newMemStore(), &fakeEffects{}
	e = newTestEffector(s, f, now)
	paused(s, "c2", now)
	if _, _, err := e.do(ctx, "c2", conversation.ExpireTransition()); err != nil {
		t.Fatal(err)
	}
	want := []string{"event calls_expired r1_c2", "withdraw r1_c2 a", "batchDone r1_c2", "launch r2_c2 from resuming"}
	if got := f.list(); !slices.Equal(got, want) {
		t.Errorf("expiry carried out %q, want %q", got, want)
	}
	if st := e.observer.(*Counts); st.Expired.Load() != 1 || st.FollowUps.Load() != 1 {
		t.Errorf("observed %d expired, %d follow-ups; want 1 and 1", st.Expired.Load(), st.FollowUps.Load())
	}
	if c, _, _ := s.current("c2"); c.Status != conversation.StatusResuming || c.Batch.FollowUpRunID != "r2_c2" {
		t.Errorf("stored after the expiry: %s", describeState(c))
	}
}

// A delete through the effector on a memory store: the tombstone's effects
// are carried out by the delete whose tombstone it is, and by it only; a
// purge that fails stops what follows it, and the delete asked again
// finishes it and answers ErrNotFound.
func TestEffectorDelete(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx := context.Background()
	// cancelled stores conversation id cancelled while paused, its call a
	// still queued.
	cancelled := func(s *memStore, id string) {
		t.Helper()
		c := conversation.New(id, conversation.RunRecord{RunID: "r1_" + id, Status: conversation.StatusRunning, StartedAt: now},
			&conversation.Lease{Owner: "me", RunID: "r1_" + id, Until: now.Add(time.Minute)}, now)
		if err := c.Pause("me", "r1_"+id, nil, &conversation.Batch{RunID: "r1_" + id, Calls: []*conversation.PendingCall{
			{ToolCallID: "a", ToolName: "t", Kind: deferred.KindCall, Deadline: now.Add(time.Hour)},
		}}, now); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Cancel(conversation.CancelledMessage, now); err != nil {
			t.Fatal(err)
		}
		if _, err := s.create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	purges := func(s *memStore, f *fakeEffects, fail error) {
		s.purged = func(id string, keep uint64) error {
			f.add(fmt.Sprintf("purge log %s keep %d", id, keep))
			return fail
		}
	}

	t.Run("deleted, then deleted again", func(t *testing.T) {
		t.Parallel()
		s, f := newMemStore(), &fakeEffects{}
		e := newTestEffector(s, f, now)
		purges(s, f, nil)
		cancelled(s, "c1")
		if err := e.delete(ctx, "c1"); err != nil {
			t.Fatal(err)
		}
		want := []string{"withdraw r1_c1 a", "purge log c1 keep 1", "purge events c1"}
		if got := f.list(); !slices.Equal(got, want) {
			t.Errorf("delete carried out %q, want %q", got, want)
		}
		if err := e.delete(ctx, "c1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("delete again: %v, want ErrNotFound", err)
		}
		want = append(want, "purge log c1 keep 1", "purge events c1")
		if got := f.list(); !slices.Equal(got, want) {
			t.Errorf("delete again carried out %q, want %q (the purge only)", got, want)
		}
	})

	t.Run("under way is refused", func(t *testing.T) {
		t.Parallel()
		s, f := newMemStore(), &fakeEffects{}
		e := newTestEffector(s, f, now)
		purges(s, f, nil)
		if _, err := s.create(ctx, conversation.New("c1", conversation.RunRecord{RunID: "r1_c1", Status: conversation.StatusRunning, StartedAt: now},
			&conversation.Lease{Owner: "me", RunID: "r1_c1", Until: now.Add(time.Minute)}, now)); err != nil {
			t.Fatal(err)
		}
		var ce *conversation.ConflictError
		if err := e.delete(ctx, "c1"); !errors.As(err, &ce) {
			t.Errorf("delete running: %v, want a *ConflictError", err)
		}
		if got := f.list(); len(got) != 0 {
			t.Errorf("a refused delete carried out %q", got)
		}
	})

	t.Run("another replica's delete came first", func(t *testing.T) {
		t.Parallel()
		s, f := newMemStore(), &fakeEffects{}
		e := newTestEffector(s, f, now)
		other := newTestEffector(s, &fakeEffects{}, now)
		purges(s, f, nil)
		cancelled(s, "c1")
		came := false
		s.appended = func(id string) {
			if came {
				return
			}
			came = true
			if _, err := other.store.delete(ctx, id, func(c *conversation.State) error { return c.Delete(now) }); err != nil {
				t.Error(err)
			}
		}
		if err := e.delete(ctx, "c1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("delete after another's: %v, want ErrNotFound", err)
		}
		// The withdrawal is the other delete's to make.
		if got, want := f.list(), []string{"purge log c1 keep 1", "purge events c1"}; !slices.Equal(got, want) {
			t.Errorf("the delete that lost carried out %q, want %q", got, want)
		}
	})

	t.Run("a purge that fails stops the rest", func(t *testing.T) {
		t.Parallel()
		s, f := newMemStore(), &fakeEffects{}
		e := newTestEffector(s, f, now)
		boom := errors.New("purge failed")
		purges(s, f, boom)
		cancelled(s, "c1")
		if err := e.delete(ctx, "c1"); !errors.Is(err, boom) {
			t.Fatalf("delete: %v, want the purge's error", err)
		}
		want := []string{"withdraw r1_c1 a", "purge log c1 keep 1"}
		if got := f.list(); !slices.Equal(got, want) {
			t.Errorf("delete carried out %q, want %q", got, want)
		}
		purges(s, f, nil)
		if err := e.delete(ctx, "c1"); !errors.Is(err, ErrNotFound) {
			t.Errorf("delete again: %v, want ErrNotFound", err)
		}
		want = append(want, "purge log c1 keep 1", "purge events c1")
		if got := f.list(); !slices.Equal(got, want) {
			t.Errorf("delete again carried out %q, want %q", got, want)
		}
	})
}

func describeState(c *conversation.State) string {
	if c == nil {
		return "<nil>"
	}
	return string(c.Status)
}

// A follow-up launched before its claim is stored: the effector defers
// the append, the event sink keeps the run's events apart, and the claim
// is stored with the run's end as one record, the run's events going out
// before the end's. A cancel that comes first is carried out as any write,
// its event included, and drops the deferred claim: the run's events are
// forgotten and its replies recorded again. On a memory store.
func TestEffectorDefersAClaim(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx := context.Background()
	setup := func(t *testing.T) (*memStore, *fakeEffects, *effector, **deferredAppend, string) {
		s, f := newMemStore(), &fakeEffects{}
		e := newTestEffector(s, f, now)
		e.claimWindow, e.runCtx = time.Hour, ctx
		e.reapply = func(_ context.Context, convID string, _ []*replyJob) { f.add("reapply " + convID) }
		var launched *deferredAppend
		e.launch = func(_, runID string, c *conversation.State, _ uint64, d *deferredAppend, hooks runHooks) {
			launched = d
			hooks.began()
			f.add("launch " + runID + " from " + string(c.Status))
		}
		c := conversation.New("c1", conversation.RunRecord{RunID: "r1_c1", Status: conversation.StatusRunning, StartedAt: now},
			&conversation.Lease{Owner: "me", RunID: "r1_c1", Until: now.Add(time.Minute)}, now)
		if err := c.Pause("me", "r1_c1", nil, &conversation.Batch{RunID: "r1_c1", Calls: []*conversation.PendingCall{
			{ToolCallID: "a", ToolName: "t", Kind: deferred.KindCall, Deadline: now},
		}}, now); err != nil {
			t.Fatal(err)
		}
		rev, err := s.create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		claimed := c.Clone()
		claimed.Expire(now)
		followUp := e.claimer().ClaimIn(claimed, now)
		if followUp == "" {
			t.Fatal("nothing to claim")
		}
		e.deferClaim(c, rev, claimed, followUp, nil)
		return s, f, e, &launched, followUp
	}

	t.Run("stored with the end", func(t *testing.T) {
		s, f, e, launched, runID := setup(t)
		c, _, err := e.doRun(ctx, "c1", nil, 0, *launched, func(c *conversation.State, now time.Time) ([]conversation.Effect, error) {
			if err := c.Complete("me", runID, nil, "42", now); err != nil {
				return nil, err
			}
			return []conversation.Effect{conversation.EmitEffect(runID, EventRunCompleted, "", nil)}, nil
		})
		if err != nil || c.Status != conversation.StatusCompleted {
			t.Fatalf("end: %s, %v", describeState(c), err)
		}
		want := []string{"defer events " + runID, "launch " + runID + " from resuming", "settle events " + runID, "event run_completed " + runID}
		if got := f.list(); !slices.Equal(got, want) {
			t.Errorf("carried out %q, want %q", got, want)
		}
		if stored, seq, _ := s.current("c1"); stored.Status != conversation.StatusCompleted || seq != 2 {
			t.Errorf("stored %s at %d; want completed in the record after the pause (2)", describeState(stored), seq)
		}
		if st := e.observer.(*Counts); st.ClaimedWithEnd.Load() != 1 || st.FollowUps.Load() != 1 {
			t.Errorf("observed %d stored with the end, %d follow-ups; want 1 and 1", st.ClaimedWithEnd.Load(), st.FollowUps.Load())
		}
	})

	t.Run("a cancel comes first", func(t *testing.T) {
		s, f, e, launched, runID := setup(t)
		if _, err := e.doRequest(ctx, "c1", conversation.CancelTransition(conversation.CancelledMessage)); err != nil {
			t.Fatal(err)
		}
		if err := (*launched).store(ctx); !errors.Is(err, errDeferredDropped) {
			t.Errorf("storing the claim after the cancel: %v, want errDeferredDropped", err)
		}
		want := []string{"defer events " + runID, "launch " + runID + " from resuming",
			"notice r1_c1", "withdraw r1_c1 a", "event conversation_cancelled r1_c1",
			"drop events " + runID, "reapply c1"}
		if got := f.list(); !slices.Equal(got, want) {
			t.Errorf("carried out %q, want %q", got, want)
		}
		if stored, _, _ := s.current("c1"); stored.Status != conversation.StatusCancelled {
			t.Errorf("stored %s, want cancelled", describeState(stored))
		}
		if st := e.observer.(*Counts); st.TentativeDropped.Load() != 1 || st.FollowUps.Load() != 0 {
			t.Errorf("observed %d dropped, %d follow-ups; want 1 and 0", st.TentativeDropped.Load(), st.FollowUps.Load())
		}
	})
}
