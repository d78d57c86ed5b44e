package orchestrator

import (
	"fmt"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// MaxReplyBytes bounds what a reply adds to its conversation (see
// wire.MaxReplyBytes). A larger result is taken as a failed one saying so;
// a larger decision is refused and dead-lettered (retrying it would only
// delay that).
const MaxReplyBytes = wire.MaxReplyBytes

// checkReplySize refuses a decision its conversation will not hold.
func checkReplySize(r bus.Reply) error {
	if r.Decision == nil {
		return nil
	}
	if n := r.Decision.PayloadBytes(); n > MaxReplyBytes {
		return fmt.Errorf("decision too large: %d bytes of override args and message; the limit is %d", n, MaxReplyBytes)
	}
	return nil
}

// newTicker is time.NewTicker with a floor, so a tiny configured interval
// cannot spin.
func newTicker(d time.Duration) *time.Ticker {
	return time.NewTicker(max(d, 10*time.Millisecond))
}
