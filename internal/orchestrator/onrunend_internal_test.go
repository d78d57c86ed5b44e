package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
)

// OnRunEnd is told of each run's end once it is stored, a paused run's
// after its calls are published (one publish for the batch), with the
// conversation as stored; a run's end that is refused tells it nothing.
// Through the effector on a memory store: the runner hands a run's end to
// it as a transition returning endedEffects.
func TestOnRunEndToldOnceStoredAfterThePublish(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx := context.Background()
	s, f := newMemStore(), &fakeEffects{}
	e := newTestEffector(s, f, now)
	e.publishPaused = func(_ context.Context, c *conversation.State) error {
		f.add(fmt.Sprintf("publish %s %d calls", c.Batch.RunID, len(c.Batch.Calls)))
		return nil
	}
	e.onRunEnd = func(c *conversation.State) {
		stored, _, err := s.current(c.ID)
		if err != nil || stored.Status != c.Status || len(stored.Runs) != len(c.Runs) || !stored.UpdatedAt.Equal(c.UpdatedAt) {
			t.Errorf("OnRunEnd told of %s with %d runs; stored: %s, %v", c.Status, len(c.Runs), describeState(stored), err)
		}
		f.add(fmt.Sprintf("onRunEnd %s %d runs", c.Status, len(c.Runs)))
	}
	running := func(id string) {
		t.Helper()
		if _, err := s.create(ctx, conversation.New(id, conversation.RunRecord{RunID: "r1_" + id, Status: conversation.StatusRunning, StartedAt: now},
			&conversation.Lease{Owner: "me", RunID: "r1_" + id, Until: now.Add(time.Minute)}, now)); err != nil {
			t.Fatal(err)
		}
	}
	// What the runner's end does: the run ended (Pause and Complete refuse
	// it unless the lease is held), and what that asks for.
	end := func(runID string, apply func(c *conversation.State) error) conversation.Transition {
		return func(c *conversation.State, _ time.Time) ([]conversation.Effect, error) {
			if err := apply(c); err != nil {
				return nil, err
			}
			return conversation.EndedEffects(c, runID, nil), nil
		}
	}
	// What was told of the runs' ends, of the effects recorded.
	only := func(prefixes ...string) []string {
		var out []string
		for _, s := range f.list() {
			if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(s, p) }) {
				out = append(out, s)
			}
		}
		return out
	}

	running("c1")
	if _, _, err := e.do(ctx, "c1", end("r1_c1", func(c *conversation.State) error {
		return c.Pause("me", "r1_c1", nil, &conversation.Batch{RunID: "r1_c1", Calls: []*conversation.PendingCall{
			{ToolCallID: "a", ToolName: "t", Kind: deferred.KindApproval, Deadline: now.Add(time.Hour)},
			{ToolCallID: "b", ToolName: "t", Kind: deferred.KindApproval, Deadline: now.Add(time.Hour)},
		}}, now)
	})); err != nil {
		t.Fatal(err)
	}
	if got, want := only("publish ", "onRunEnd "), []string{"publish r1_c1 2 calls", "onRunEnd paused 1 runs"}; !slices.Equal(got, want) {
		t.Errorf("a paused run's end: %q, want %q", got, want)
	}

	running("c2")
	if _, _, err := e.do(ctx, "c2", end("r1_c2", func(c *conversation.State) error {
		return c.Complete("me", "r1_c2", nil, "42", now)
	})); err != nil {
		t.Fatal(err)
	}
	// Another replica's lease: the end is refused and tells nothing.
	running("c3")
	if _, _, err := e.do(ctx, "c3", end("r1_c3", func(c *conversation.State) error {
		return c.Complete("other", "r1_c3", nil, "", now)
	})); !errors.Is(err, conversation.ErrLeaseLost) {
		t.Errorf("an end under another's lease: %v, want conversation.ErrLeaseLost", err)
	}
	if got, want := only("onRunEnd "), []string{"onRunEnd paused 1 runs", "onRunEnd completed 1 runs"}; !slices.Equal(got, want) {
		t.Errorf("OnRunEnd told %q, want %q", got, want)
	}
	if got := only("publish "); len(got) != 1 {
		t.Errorf("batches published %q, want one", got)
	}
}
