// Package httpretrytest has a clock and a sleeper for tests of code that
// retries with package httpretry: the waits are recorded instead of slept,
// and they move the clock.
package httpretrytest

import (
	"context"
	"sync"
	"time"
)

// Waits records the waits between attempts against a clock they move.
// Its Clock and Sleep methods fit the seams of the retrying code.
type Waits struct {
	mu  sync.Mutex
	now time.Time
	got []time.Duration
}

// New returns Waits whose clock reads start.
func New(start time.Time) *Waits { return &Waits{now: start} }

// Clock is the time: start plus every wait so far.
func (w *Waits) Clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

// Sleep records d and moves the clock by it, without sleeping.
func (w *Waits) Sleep(_ context.Context, d time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, d)
	w.now = w.now.Add(d)
	return nil
}

// All is every wait so far, in order.
func (w *Waits) All() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.got...)
}
