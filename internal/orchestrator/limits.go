package orchestrator

import (
	"fmt"

	"github.com/toolgate/toolgate/internal/bus"
)

// MaxReplyBytes bounds what a reply adds to its conversation: a result's
// value, content, message and metadata, a decision's override args and
// message. A conversation is one KV value, which must fit NATS's max
// payload (1 MiB by default) with the reply in it twice (the batch and the
// follow-up's history); a larger reply could never be stored, and retrying
// it would only delay its dead letter.
const MaxReplyBytes = 256 << 10

// checkReplySize refuses a reply its conversation could not hold.
func checkReplySize(r bus.Reply) error {
	var n int
	what := "result"
	switch {
	case r.Call != nil:
		n = len(r.Call.Value) + len(r.Call.Content) + len(r.Call.Message) + len(r.Call.Metadata)
	case r.Decision != nil:
		what = "decision"
		n = len(r.Decision.OverrideArgs) + len(r.Decision.Message)
	}
	if n > MaxReplyBytes {
		return fmt.Errorf("%s too large: %d bytes of value, content, message, metadata and override args; the limit is %d", what, n, MaxReplyBytes)
	}
	return nil
}
