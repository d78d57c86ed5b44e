package orchestrator

import (
	"testing"
	"time"
)

// An entry is taken once, by the mark, and one never taken is forgotten
// once older than the cutoff, the others kept.
func TestStoredRunsTakeAndPrune(t *testing.T) {
	var s storedRuns
	if s.take("r0") {
		t.Fatal("an empty set took r0")
	}
	t0 := time.Unix(1000, 0)
	s.add("r1", t0)
	s.add("r2", t0.Add(time.Minute))
	if !s.take("r1") || s.take("r1") {
		t.Fatal("r1 not taken exactly once")
	}
	s.add("r1", t0)
	s.prune(t0.Add(time.Second))
	if s.len() != 1 || s.take("r1") || !s.take("r2") {
		t.Fatalf("after the prune: %d entries, want r2 alone", s.len())
	}
}
