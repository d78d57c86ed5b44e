package orchestrator

import (
	"fmt"

	"github.com/toolgate/toolgate/internal/bus"
)

// MaxReplyBytes bounds what a reply adds to its conversation (see
// bus.MaxReplyBytes). A larger result is taken as a failed one saying so;
// a larger decision is refused and dead-lettered (retrying it would only
// delay that).
const MaxReplyBytes = bus.MaxReplyBytes

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
