package orchestrator

import (
	"slices"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
)

// One entry per conversation: an earlier deadline moves it, a later one
// leaves it, forget takes it out, and due takes out, in order, those
// that are due.
func TestDeadlineIndex(t *testing.T) {
	d := newDeadlineIndex()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	steps := []struct {
		name     string
		do       func() bool
		earliest bool // what the step reports
		first    time.Time
		n        int
	}{
		{"first", func() bool { return d.add("a", at(30)) }, true, at(30), 1},
		{"later one, other conversation", func() bool { return d.add("b", at(40)) }, false, at(30), 2},
		{"later deadline kept out", func() bool { return d.add("b", at(50)) }, false, at(30), 2},
		{"earlier deadline moves it first", func() bool { return d.add("b", at(10)) }, true, at(10), 2},
		{"zero ignored", func() bool { return d.add("c", time.Time{}) }, false, at(10), 2},
		{"third", func() bool { return d.add("c", at(20)) }, false, at(10), 3},
		{"forget the first", func() bool { d.forget("b"); return false }, false, at(20), 2},
		{"forget one not there", func() bool { d.forget("zz"); return false }, false, at(20), 2},
	}
	for _, s := range steps {
		if got := s.do(); got != s.earliest {
			t.Errorf("%s: reported earliest %v, want %v", s.name, got, s.earliest)
		}
		if got := d.earliest(); !got.Equal(s.first) {
			t.Errorf("%s: earliest %s, want %s", s.name, got, s.first)
		}
		if got := d.len(); got != s.n || d.h.Len() != s.n {
			t.Errorf("%s: %d conversations, %d in the heap; want %d", s.name, got, d.h.Len(), s.n)
		}
	}
	if got := d.due(at(25)); !slices.Equal(got, []string{"c"}) {
		t.Errorf("due at 25 s: %v, want [c]", got)
	}
	if got := d.due(at(60)); !slices.Equal(got, []string{"a"}) {
		t.Errorf("due at 60 s: %v, want [a]", got)
	}
	if d.len() != 0 || !d.earliest().IsZero() {
		t.Errorf("%d left, earliest %s; want none", d.len(), d.earliest())
	}
}

// schedule follows a conversation: its next deadline while a call waits,
// no entry once the batch is answered or the conversation finished.
func TestDeadlineIndexSchedule(t *testing.T) {
	d := newDeadlineIndex()
	now := time.Now()
	c := &conversation.State{ID: "c", Status: conversation.StatusPaused, Batch: &conversation.Batch{Calls: []*conversation.PendingCall{
		{ToolCallID: "1", Deadline: now.Add(time.Minute)},
		{ToolCallID: "2", Deadline: now.Add(time.Hour)},
	}}}
	d.schedule(c)
	if !d.earliest().Equal(now.Add(time.Minute)) {
		t.Fatalf("earliest %s, want the first call's deadline", d.earliest())
	}
	c.Batch.Calls[0].Reply = &conversation.Reply{Outcome: conversation.OutcomeReturn}
	d.schedule(c) // the later deadline does not move the entry: checked at the first, then again
	if d.len() != 1 {
		t.Fatalf("%d entries, want 1", d.len())
	}
	c.Batch.Calls[1].Reply = &conversation.Reply{Outcome: conversation.OutcomeReturn}
	d.schedule(c)
	if d.len() != 0 {
		t.Errorf("%d entries after the batch was answered, want none", d.len())
	}
	c.Batch.Calls[1].Reply = nil
	d.schedule(c)
	c.Status = conversation.StatusCancelled
	d.schedule(c)
	if d.len() != 0 {
		t.Errorf("%d entries after the conversation finished, want none", d.len())
	}
}

// A complete batch leaves nothing behind in memory: neither its deadline
// nor the mark that its calls were seen stored.
func TestBatchDoneForgetsTheBatch(t *testing.T) {
	co := &core{deadlines: newDeadlineIndex()}
	pub := &publisher{publisherParams: publisherParams{deadlines: co.deadlines}}
	now := time.Now()
	co.deadlines.add("c1", now.Add(time.Minute))
	co.deadlines.add("c2", now.Add(time.Hour))
	pub.stored.add("r1_c1", now)
	pub.stored.add("r1_c2", now)
	pub.batchDone("c1", "r1_c1")
	if co.deadlines.len() != 1 || !co.deadlines.earliest().Equal(now.Add(time.Hour)) {
		t.Errorf("%d deadlines, earliest %s; want c2's only", co.deadlines.len(), co.deadlines.earliest())
	}
	if pub.stored.len() != 1 || !pub.stored.take("r1_c2") {
		t.Errorf("%d runs seen stored; want r1_c2's only", pub.stored.len())
	}
}
