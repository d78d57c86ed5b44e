package orchestrator

import (
	"sync"
	"time"
)

// storedRuns are the runs whose calls, all those not marked published nor
// answered at the time, this replica published and saw stored by the
// stream (their acks came). A paused run publishes its batch without
// marking it, and reconcile marks it a pass later (publishDue): for these
// it writes the mark without publishing the calls again, a repeat the
// stream would only drop (for a paused conversation waiting on a person,
// every call was published twice). Another replica, or this one after a
// restart, does not know and publishes again, as before. Entries are
// taken by the mark, or forgotten after storedRunsKeep: reconcile marks a
// batch within publishAfterMax of its pause, and one not marked by then
// (a failed mark, a slow pass) is published again, which is what a
// forgotten entry costs. So the set holds the runs paused within about a
// minute, a few dozen bytes each.
type storedRuns struct {
	mu sync.Mutex
	m  map[string]time.Time
}

func (s *storedRuns) add(runID string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]time.Time{}
	}
	s.m[runID] = now
}

// take forgets runID and reports whether its calls were seen stored.
func (s *storedRuns) take(runID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[runID]
	delete(s.m, runID)
	return ok
}

// prune forgets the entries added before cutoff.
func (s *storedRuns) prune(cutoff time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, at := range s.m {
		if at.Before(cutoff) {
			delete(s.m, id)
		}
	}
}

// len is the number of entries, for tests.
func (s *storedRuns) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
