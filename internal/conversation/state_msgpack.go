package conversation

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/msgpackmap"
)

// EncodeMsgpack writes c as msgpack's reflection would, without its
// garbage on each of thirteen optional fields (package msgpackmap): every
// stored change encodes the head of its conversation up to three times
// (its fingerprint, diff's comparison, the record).
func (c State) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := msgpackmap.Writer{Enc: enc}
	w.Len(6 + msgpackmap.Count(c.Batch != nil, c.Output != "", c.Error != "", c.Lease != nil, c.StaleReplies != 0, len(c.Decisions) > 0,
		c.Agent != "", c.AgentDigest != "", len(c.Caller) > 0, len(c.FrontendTools) > 0, c.Signed, c.Unserved != "", !c.UnservedSince.IsZero()))
	w.Str("id", c.ID)
	w.Str("status", string(c.Status))
	w.Value("history", c.History)
	w.Value("runs", c.Runs)
	if c.Batch != nil {
		w.Value("batch", c.Batch)
	}
	if c.Output != "" {
		w.Str("output", c.Output)
	}
	if c.Error != "" {
		w.Str("error", c.Error)
	}
	if c.Lease != nil {
		w.Value("lease", c.Lease)
	}
	if c.StaleReplies != 0 {
		w.Int("stale_replies", int64(c.StaleReplies))
	}
	if len(c.Decisions) > 0 {
		w.Value("decisions", c.Decisions)
	}
	if c.Agent != "" {
		w.Str("agent", c.Agent)
	}
	if c.AgentDigest != "" {
		w.Str("agent_digest", c.AgentDigest)
	}
	if len(c.Caller) > 0 {
		w.Bin("caller", c.Caller)
	}
	if len(c.FrontendTools) > 0 {
		w.Value("frontend_tools", c.FrontendTools)
	}
	if c.Signed {
		w.Value("signed", true)
	}
	if c.Unserved != "" {
		w.Str("unserved", c.Unserved)
	}
	if !c.UnservedSince.IsZero() {
		w.Time("unserved_since", c.UnservedSince)
	}
	w.Time("created_at", c.CreatedAt)
	w.Time("updated_at", c.UpdatedAt)
	return w.Err
}
