package conversation

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/vmihailenco/msgpack/v5"
)

// A mark of calls published is stored as the marks alone, whatever the
// calls hold: not the calls again, nor the head. A call changed otherwise
// too (answered) is stored whole; one that had a time of publication keeps
// it.
func TestMarkRecordHoldsOnlyTheMarks(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0.Add(time.Minute)
	args := json.RawMessage(`{"path":"README.md","text":"a long argument the model sent, which a mark must not store again"}`)
	paused := func() *State {
		c := New("c1", RunRecord{RunID: "r1", Status: StatusRunning, Prompt: "p", StartedAt: t0},
			&Lease{Owner: "me", RunID: "r1", Until: now.Add(time.Hour)}, t0)
		b := &Batch{RunID: "r1"}
		for _, id := range []string{"a", "b", "c"} {
			b.Calls = append(b.Calls, &PendingCall{ToolCallID: id, ToolName: "write_file", Kind: deferred.KindCall,
				Args: args, ArgsDigest: "digest-" + id, Deadline: now.Add(time.Hour)})
		}
		if err := c.Pause("me", "r1", []agent.Message{{Kind: agent.KindRequest}}, b, t0); err != nil {
			t.Fatal(err)
		}
		return c
	}

	c := paused()
	before, fp := c.Clone(), FingerprintOf(c)
	if !c.MarkPublished("r1", []string{"a", "b", "c"}, now) {
		t.Fatal("nothing marked")
	}
	if !c.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("a mark moved UpdatedAt from %v to %v", before.UpdatedAt, c.UpdatedAt)
	}
	r := Diff(fp, c)
	if r.Head != nil || len(r.Calls) != 0 || len(r.Published) != 3 {
		t.Fatalf("mark record: head %v, %d calls, %d marks; want only 3 marks", r.Head != nil, len(r.Calls), len(r.Published))
	}
	if b, err := msgpack.Marshal(r); err != nil || len(b) > 100 {
		t.Errorf("mark record of 3 calls is %d bytes (%v), want at most 100", len(b), err)
	}
	checkRecord(t, "the marks", before, r, c)

	// One answered as well (stored whole), one with a time of its own.
	c = paused()
	c.Batch.Calls[2].PublishedAt = t0
	before, fp = c.Clone(), FingerprintOf(c)
	c.MarkPublished("r1", []string{"a", "b", "c"}, now)
	c.Batch.Calls[0].Reply = &Reply{Outcome: OutcomeReturn, At: now}
	r = Diff(fp, c)
	if len(r.Calls) != 1 || r.Calls[0].Index != 0 || len(r.Published) != 2 {
		t.Fatalf("record: %d calls, %d marks; want call 0 whole and 2 marks", len(r.Calls), len(r.Published))
	}
	if !r.Published[1].At.Equal(t0) {
		t.Errorf("call c marked at %v, want its own time %v", r.Published[1].At, t0)
	}
	checkRecord(t, "a mark and an answer", before, r, c)

	// A record marking a call the conversation does not have is refused.
	bad := &Record{Published: []CallMark{{Index: 3, At: now}}}
	if err := paused().Fold(bad); err == nil {
		t.Error("a mark of call 3 of 3 was folded")
	}
}
