package wire

import "fmt"

// MaxReplyBytes bounds what a reply adds to its conversation: a result's
// value, content, message and metadata, a decision's override args and
// message (see PayloadBytes). A larger result is taken as a failed result
// saying so (see WithinLimit), by the worker that made it and, from other
// workers, by the orchestrator; a larger decision is refused.
const MaxReplyBytes = 256 << 10

// PayloadBytes is what a result adds to its conversation, the size
// MaxReplyBytes bounds.
func (r CallReply) PayloadBytes() int {
	return len(r.Value) + len(r.Content) + len(r.Message) + len(r.Metadata)
}

// PayloadBytes is what a decision adds to its conversation, the size
// MaxReplyBytes bounds.
func (d Decision) PayloadBytes() int {
	return len(d.OverrideArgs) + len(d.Message)
}

// WithinLimit returns r if it is within MaxReplyBytes, and otherwise a
// failed result of the same call saying that it was too large, so that the
// model learns at once why the tool gave nothing, and false.
func (r CallReply) WithinLimit() (CallReply, bool) {
	n := r.PayloadBytes()
	if n <= MaxReplyBytes {
		return r, true
	}
	return CallReply{
		RunID: r.RunID, ToolCallID: r.ToolCallID, WorkerID: r.WorkerID, Outcome: OutcomeFailed,
		Message: fmt.Sprintf("result too large: %d bytes, limit %d", n, MaxReplyBytes),
	}, false
}
