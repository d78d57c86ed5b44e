package orchestrator

import (
	"fmt"

	"github.com/toolgate/toolgate/wire"
)

// A conversation is stored as one value, which must fit NATS's max payload.
// A change that would take it over is never retried (it could only fail
// again, and the conversation would wait forever): a reply group whose
// results do not fit records them as failed results instead, which the
// model sees in its follow-up; a run whose history does not fit fails; any
// other change that does not fit fails the conversation (failTooLarge).

// shrunk is in with a result's value, content and metadata replaced by a
// failed outcome saying why: what a reply becomes when its conversation
// cannot hold it.
func shrunk(in incoming, tl *TooLargeError) incoming {
	if in.result == nil || in.result.Outcome == wire.OutcomeFailed {
		return in
	}
	r := *in.result
	r.Outcome = wire.OutcomeFailed
	r.Message = fmt.Sprintf("result not kept: %d bytes of value and content would take the conversation over the store's limit of %d bytes", len(r.Value)+len(r.Content)+len(r.Metadata), tl.Limit)
	r.Value, r.Content, r.Metadata = nil, "", nil
	in.result = &r
	return in
}
