package agent

import (
	"context"
	"testing"
)

// A phase in which no call's body runs (its calls deferred, or resumed
// from their replies: every phase of a deferred call) makes nothing to
// cancel or wait for.
func TestPhaseWithoutBodiesAllocs(t *testing.T) {
	r := &run{ctx: context.Background()}
	items := []*callItem{
		{part: Part{Kind: PartToolCall, ToolName: "t", ToolCallID: "a"}, state: stPending},
		{part: Part{Kind: PartToolCall, ToolName: "t", ToolCallID: "b"}, state: stPending},
	}
	n := testing.AllocsPerRun(100, func() {
		if err := r.phase(items, false); err != nil {
			t.Fatal(err)
		}
	})
	if n != 0 {
		t.Errorf("phase with nothing to run: %v allocations, want 0", n)
	}
}
