package orchestrator

import (
	"slices"
	"testing"
)

// Every replica computes the same owners from the same members, in any
// order; each owns its share (at most one apart); a member that leaves or
// joins moves few partitions besides its own.
func TestAssignPartitions(t *testing.T) {
	t.Parallel()
	const n = 12
	members := []string{"orch-a1", "orch-b2", "orch-c3", "orch-d4"}
	for m := 1; m <= len(members); m++ {
		set := members[:m]
		got := assignPartitions(set, n)
		rev := slices.Clone(set)
		slices.Reverse(rev)
		if again := assignPartitions(append(rev, set[0]), n); !slices.Equal(got, again) {
			t.Errorf("%d members: %v, and in another order %v", m, got, again)
		}
		load := map[string]int{}
		for p, o := range got {
			if !slices.Contains(set, o) {
				t.Fatalf("%d members: partition %d owned by %q", m, p, o)
			}
			load[o]++
		}
		for _, o := range set {
			if l := load[o]; l < n/m || l > (n+m-1)/m {
				t.Errorf("%d members: %s owns %d of %d", m, o, l, n)
			}
		}
	}
	moved := func(a, b []string) int {
		c := 0
		for p := range a {
			if a[p] != b[p] {
				c++
			}
		}
		return c
	}
	three, four := assignPartitions(members[:3], n), assignPartitions(members, n)
	// The fourth takes its 3; a greedy bound may shift a few others.
	if m := moved(three, four); m > n/2 {
		t.Errorf("a join moved %d of %d partitions: %v → %v", m, n, three, four)
	}
	if got := assignPartitions(nil, n); !slices.Equal(got, make([]string, n)) {
		t.Errorf("no members: %v", got)
	}
}
