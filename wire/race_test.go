//go:build race

package wire_test

// raceEnabled: the race detector's sync.Pool drops some of what is put
// back, so that a test of pooled allocations cannot expect none.
const raceEnabled = true
