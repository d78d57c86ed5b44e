package orchestrator

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// unservedProbe is a tool's takers as a test sets them, and what the
// unservedCalls told.
type unservedProbe struct {
	mu     sync.Mutex
	served map[string]bool
	looks  map[string]int
	told   []string // tool:call
	now    time.Time
	// block, when set, holds each look until it is closed.
	block chan struct{}
}

func newUnservedProbe(t *testing.T) (*unservedCalls, *unservedProbe, context.CancelFunc) {
	p := &unservedProbe{served: map[string]bool{}, looks: map[string]int{}, now: time.Unix(1e9, 0)}
	ctx, cancel := context.WithCancel(context.Background())
	u := &unservedCalls{
		takers: func(ctx context.Context, tool string) (bool, error) {
			p.mu.Lock()
			p.looks[tool]++
			block := p.block
			p.mu.Unlock()
			if block != nil {
				<-block
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.served[tool], nil
		},
		emit: func(_ context.Context, convID, runID, typ, callID string, data any) {
			p.mu.Lock()
			defer p.mu.Unlock()
			if typ != EventToolUnserved {
				t.Errorf("event %s", typ)
			}
			p.told = append(p.told, callID)
		},
		log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		clock: func() time.Time { p.mu.Lock(); defer p.mu.Unlock(); return p.now },
		every: time.Minute, recheck: time.Millisecond,
		tools: map[string]*toolTakers{}, ctx: ctx,
	}
	t.Cleanup(func() { cancel(); u.stop() })
	return u, p, cancel
}

func (p *unservedProbe) state() (told []string, looks map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.told), map[string]int{"a": p.looks["a"], "b": p.looks["b"]}
}

func calls(ids ...string) []unservedCall {
	var cs []unservedCall
	for _, id := range ids {
		cs = append(cs, unservedCall{convID: "c", runID: "r", callID: id})
	}
	return cs
}

// A tool is looked at once per window whatever the number of calls; the
// calls published during a look wait for its answer, those after it take
// it; an unserved tool gets a second look before it counts as such; a
// served one tells nothing.
func TestUnservedCallsLooksOncePerWindow(t *testing.T) {
	u, p, _ := newUnservedProbe(t)
	p.served["b"] = true
	p.block = make(chan struct{})
	u.published("a", calls("a1"))
	u.published("a", calls("a2", "a3"))
	u.published("b", calls("b1"))
	if told, _ := p.state(); len(told) != 0 {
		t.Fatalf("told %v before any look ended", told)
	}
	close(p.block)
	u.wg.Wait()
	told, looks := p.state()
	if !slices.Equal(told, []string{"a1", "a2", "a3"}) {
		t.Errorf("told %v, want a1 a2 a3", told)
	}
	if looks["a"] != 2 || looks["b"] != 1 {
		t.Errorf("looks %v, want a twice (a second look before counting it unserved), b once", looks)
	}

	// Within the window: no look; a is told at once, b not at all.
	u.published("a", calls("a4"))
	u.published("b", calls("b2"))
	u.wg.Wait()
	if told, looks = p.state(); !slices.Equal(told, []string{"a1", "a2", "a3", "a4"}) || looks["a"] != 2 || looks["b"] != 1 {
		t.Errorf("within the window: told %v looks %v", told, looks)
	}

	// After it: looked at again; a worker came for a.
	p.mu.Lock()
	p.now = p.now.Add(time.Minute)
	p.served["a"] = true
	p.mu.Unlock()
	u.published("a", calls("a5"))
	u.wg.Wait()
	if told, looks = p.state(); len(told) != 4 || looks["a"] != 3 {
		t.Errorf("after a worker came: told %v looks %v", told, looks)
	}
}

// Stopping ends a look waiting for its second try, which then tells
// nothing (a stopping orchestrator does not know the tool unserved); no
// new look starts.
func TestUnservedCallsStopTellsNothing(t *testing.T) {
	u, p, cancel := newUnservedProbe(t)
	u.recheck = time.Hour
	u.published("a", calls("a1"))
	cancel()
	u.stop()
	u.published("a", calls("a2"))
	u.stop()
	if told, looks := p.state(); len(told) != 0 || looks["a"] != 1 {
		t.Errorf("told %v looks %v, want none and one", told, looks)
	}
}

// The calls waiting for a look, and those it is telling about, are
// pending until their events are out (Orchestrator.EventsPending).
func TestUnservedCallsPending(t *testing.T) {
	u, p, _ := newUnservedProbe(t)
	p.block = make(chan struct{})
	u.published("a", calls("a1"))
	u.published("a", calls("a2", "a3"))
	if n := u.pending(); n != 3 {
		t.Errorf("pending %d during the look, want 3", n)
	}
	close(p.block)
	deadline := time.Now().Add(10 * time.Second)
	for {
		told, _ := p.state()
		if len(told) == 3 && u.pending() == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("told %v, pending %d; want 3 told and none pending", told, u.pending())
		}
		time.Sleep(time.Millisecond)
	}
}
