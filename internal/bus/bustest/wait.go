package bustest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test after Timeout.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Poll(t, Timeout, what, func() (bool, string) { return cond(), "" })
}

// Poll polls cond until it holds, failing the test after timeout with the
// state cond last reported. It is for state that has no notification; the
// interval grows from 5ms to 100ms.
func Poll(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := 5 * time.Millisecond
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if state == "" {
				t.Fatalf("timed out after %s waiting for %s", timeout, what)
			}
			t.Fatalf("timed out after %s waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(tick)
		tick = min(tick*2, 100*time.Millisecond)
	}
}

// Recv receives from ch, failing the test after Timeout.
func Recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Timeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// Run runs fn in a goroutine until stop is called or the test ends. stop
// cancels fn's context, waits for fn (bounded by Timeout) and returns its
// error; it may be called more than once. If the test has not called stop,
// the cleanup does, and fails the test on an error other than
// context.Canceled.
func Run(t testing.TB, name string, fn func(context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	var err error
	halt := func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(Timeout):
				err = fmt.Errorf("%s did not stop within %s", name, Timeout)
			}
		})
		return err
	}
	var called atomic.Bool
	t.Cleanup(func() {
		if err := halt(); err != nil && !called.Load() && !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v", name, err)
		}
	})
	return func() error {
		called.Store(true)
		return halt()
	}
}
