package bus_test

import (
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
)

func TestBackOffDelay(t *testing.T) {
	t.Parallel()
	b := bus.DefaultBackOff()
	for n, want := range map[uint64]time.Duration{0: time.Second, 1: time.Second, 2: 5 * time.Second, 3: 30 * time.Second, 4: 2 * time.Minute, 40: 2 * time.Minute} {
		if got := bus.BackOffDelay(b, n); got != want {
			t.Errorf("after delivery %d: %s, want %s", n, got, want)
		}
	}
	b[0] = time.Hour
	if bus.DefaultBackOff()[0] != time.Second {
		t.Error("a caller's change to the default reached the next caller")
	}
}
