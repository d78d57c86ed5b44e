package orchestrator

import (
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// EncodeMsgpack writes c as msgpack's reflection would (fields in the
// struct's order, the empty optional ones left out) without what
// reflection costs for each optional field: a boxed copy of its value to
// test it for emptiness, and a list of the fields kept. Every stored change
// encodes the head of its conversation up to three times (its fingerprint,
// diff's comparison, the record), eleven optional fields each.
// TestConversationMsgpackAsReflection holds both to the same bytes.
func (c Conversation) EncodeMsgpack(enc *msgpack.Encoder) error {
	present := [...]bool{
		c.Batch != nil, c.Output != "", c.Error != "", c.Lease != nil, c.StaleReplies != 0, len(c.Decisions) > 0,
		c.Agent != "", c.AgentDigest != "", len(c.Caller) > 0, c.Unserved != "", !c.UnservedSince.IsZero(),
	}
	n := 6
	for _, p := range present {
		if p {
			n++
		}
	}
	w := mapWriter{enc: enc}
	w.len(n)
	w.str("id", c.ID)
	w.str("status", string(c.Status))
	w.value("history", c.History)
	w.value("runs", c.Runs)
	if c.Batch != nil {
		w.value("batch", c.Batch)
	}
	if c.Output != "" {
		w.str("output", c.Output)
	}
	if c.Error != "" {
		w.str("error", c.Error)
	}
	if c.Lease != nil {
		w.value("lease", c.Lease)
	}
	if c.StaleReplies != 0 && w.key("stale_replies") {
		w.err = enc.EncodeInt(int64(c.StaleReplies))
	}
	if len(c.Decisions) > 0 {
		w.value("decisions", c.Decisions)
	}
	if c.Agent != "" {
		w.str("agent", c.Agent)
	}
	if c.AgentDigest != "" {
		w.str("agent_digest", c.AgentDigest)
	}
	if len(c.Caller) > 0 && w.key("caller") {
		w.err = enc.EncodeBytes(c.Caller)
	}
	if c.Unserved != "" {
		w.str("unserved", c.Unserved)
	}
	if !c.UnservedSince.IsZero() {
		w.time("unserved_since", c.UnservedSince)
	}
	w.time("created_at", c.CreatedAt)
	w.time("updated_at", c.UpdatedAt)
	return w.err
}

// mapWriter writes a map's entries, keeping the first error.
type mapWriter struct {
	enc *msgpack.Encoder
	err error
}

func (w *mapWriter) len(n int) {
	if w.err == nil {
		w.err = w.enc.EncodeMapLen(n)
	}
}

// key writes k and reports whether its value is to follow.
func (w *mapWriter) key(k string) bool {
	if w.err == nil {
		w.err = w.enc.EncodeString(k)
	}
	return w.err == nil
}

func (w *mapWriter) str(k, v string) {
	if w.key(k) {
		w.err = w.enc.EncodeString(v)
	}
}

func (w *mapWriter) time(k string, v time.Time) {
	if w.key(k) {
		w.err = w.enc.EncodeTime(v)
	}
}

// value writes v as reflection does (v a pointer, slice or map: boxing it
// costs nothing).
func (w *mapWriter) value(k string, v any) {
	if w.key(k) {
		w.err = w.enc.Encode(v)
	}
}
