package testkit

import (
	"context"
	"testing"
)

// Test starts a system for t: the embedded server stores in a directory of
// the test (unless Options.Dir or Options.URL say otherwise), a failure to
// start fails the test, and the system is closed at cleanup, where a part
// that ended with an error or did not stop fails the test.
func Test(t testing.TB, opts Options) *System {
	t.Helper()
	if opts.Dir == "" && opts.URL == "" {
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultStopTimeout)
	defer cancel()
	s, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultStopTimeout)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("testkit: %v", err)
		}
	})
	return s
}
