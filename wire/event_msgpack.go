package wire

import "github.com/vmihailenco/msgpack/v5"

// EncodeMsgpack writes b as msgpack's reflection would (an event's fields
// in the struct's order, the empty optional ones left out) without what
// reflection costs for each optional field of each event: a boxed copy of
// its value to test it for emptiness, and a list of the fields kept. A
// call publishes over a dozen events, and that garbage was a visible share
// of the orchestrator's. TestEventMsgpackAsReflection holds both to the
// same bytes. (An Event alone is left to reflection: a method on *Event
// would refuse an Event value, which reflection cannot address.)
func (b EventBatch) EncodeMsgpack(enc *msgpack.Encoder) error {
	if err := enc.EncodeMapLen(1); err != nil {
		return err
	}
	if err := enc.EncodeString("events"); err != nil {
		return err
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
	n := 3
	if e.RunID != "" {
		n++
	}
	if e.ToolCallID != "" {
		n++
	}
	if len(e.Data) > 0 {
		n++
	}
	if err := enc.EncodeMapLen(n); err != nil {
		return err
	}
	if err := encodeStrings(enc, "conversation_id", e.ConversationID); err != nil {
		return err
	}
	if e.RunID != "" {
		if err := encodeStrings(enc, "run_id", e.RunID); err != nil {
			return err
		}
	}
	if err := encodeStrings(enc, "type", e.Type); err != nil {
		return err
	}
	if e.ToolCallID != "" {
		if err := encodeStrings(enc, "tool_call_id", e.ToolCallID); err != nil {
			return err
		}
	}
	if len(e.Data) > 0 {
		if err := encodeStrings(enc, "data"); err != nil {
			return err
		}
		if err := enc.EncodeBytes(e.Data); err != nil {
			return err
		}
	}
	if err := encodeStrings(enc, "time"); err != nil {
		return err
	}
	return enc.EncodeTime(e.Time)
}

// encodeStrings writes each of ss as a msgpack string.
func encodeStrings(enc *msgpack.Encoder, ss ...string) error {
	for _, s := range ss {
		if err := enc.EncodeString(s); err != nil {
			return err
		}
	}
	return nil
}
