package conversation

import (
	"bytes"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
)

// A record appended to a buffer with room is Encode's bytes after what the
// buffer held, and costs no copy of its own, as Encode's does: the store appends each
// record from a buffer it uses again.
func TestRecordAppendEncode(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := New("c1", RunRecord{RunID: "r1", Status: StatusRunning, Prompt: "p", StartedAt: t0},
		&Lease{Owner: "me", RunID: "r1", Until: t0.Add(time.Hour)}, t0)
	c.History = []agent.Message{{Kind: agent.KindRequest, Parts: []agent.Part{{Kind: agent.PartUserPrompt, Content: "p"}}}}
	r := FullRecord(c)
	want, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	buf := append(make([]byte, 0, 4<<10), "abc"...)
	got, err := r.AppendEncode(buf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:3], []byte("abc")) || !bytes.Equal(got[3:], want) {
		t.Errorf("appended %q, want abc then %q", got, want)
	}
	appended := testing.AllocsPerRun(100, func() {
		if _, err := r.AppendEncode(buf[:0]); err != nil {
			t.Fatal(err)
		}
	})
	encoded := testing.AllocsPerRun(100, func() {
		if _, err := r.Encode(); err != nil {
			t.Fatal(err)
		}
	})
	if raceEnabled {
		// The race detector's pools drop some of what is put back.
		return
	}
	if appended != encoded-1 {
		t.Errorf("AppendEncode into a buffer with room: %v allocations, Encode %v; want one fewer, its copy", appended, encoded)
	}
}
