package wire

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/msgpackmap"
)

// EncodeMsgpack writes b as msgpack's reflection would, without its
// garbage on each optional field of each event (package msgpackmap): a
// call publishes over a dozen events. An Event alone is left to
// reflection: a method on *Event would refuse an Event value, which
// reflection cannot address.
func (b EventBatch) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := msgpackmap.Writer{Enc: enc}
	w.Len(1)
	if !w.Key("events") {
		return w.Err
	}
	if b.Events == nil {
		return enc.EncodeNil()
	}
	if err := enc.EncodeArrayLen(len(b.Events)); err != nil {
		return err
	}
	for i := range b.Events {
		if err := encodeEvent(enc, &b.Events[i]); err != nil {
			return err
		}
	}
	return nil
}

func encodeEvent(enc *msgpack.Encoder, e *Event) error {
	w := msgpackmap.Writer{Enc: enc}
	w.Len(3 + msgpackmap.Count(e.RunID != "", e.ToolCallID != "", len(e.Data) > 0))
	w.Str("conversation_id", e.ConversationID)
	if e.RunID != "" {
		w.Str("run_id", e.RunID)
	}
	w.Str("type", e.Type)
	if e.ToolCallID != "" {
		w.Str("tool_call_id", e.ToolCallID)
	}
	if len(e.Data) > 0 {
		w.Bin("data", e.Data)
	}
	w.Time("time", e.Time)
	return w.Err
}
