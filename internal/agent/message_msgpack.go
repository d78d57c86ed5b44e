package agent

import "github.com/vmihailenco/msgpack/v5"

// EncodeMsgpack writes m as msgpack's reflection would (fields in the
// struct's order, the empty optional ones left out) without what
// reflection costs for each optional field of each part: a boxed copy of
// its value to test it for emptiness, and a list of the fields kept. Every
// stored change of a conversation encodes its new messages, and that
// garbage was a visible share of the orchestrator's.
// TestMessageMsgpackAsReflection holds both to the same bytes. (The method
// is on Message, not on *Part: reflection cannot address a Part value
// encoded alone, and a method on *Part would refuse it.)
func (m Message) EncodeMsgpack(enc *msgpack.Encoder) error {
	n := 5
	if m.ModelName != "" {
		n++
	}
	if m.Usage != nil {
		n++
	}
	w := msgpackMap{enc: enc}
	w.len(n)
	w.str("kind", string(m.Kind))
	if w.key("parts") {
		w.err = encodeParts(enc, m.Parts)
	}
	w.str("run_id", m.RunID)
	w.str("conversation_id", m.ConversationID)
	if w.key("timestamp") {
		w.err = enc.EncodeTime(m.Timestamp)
	}
	if m.ModelName != "" {
		w.str("model_name", m.ModelName)
	}
	if m.Usage != nil && w.key("usage") {
		w.err = enc.Encode(m.Usage)
	}
	return w.err
}

func encodeParts(enc *msgpack.Encoder, parts []Part) error {
	if parts == nil {
		return enc.EncodeNil()
	}
	if err := enc.EncodeArrayLen(len(parts)); err != nil {
		return err
	}
	for i := range parts {
		if err := encodePart(enc, &parts[i]); err != nil {
			return err
		}
	}
	return nil
}

func encodePart(enc *msgpack.Encoder, p *Part) error {
	n := 1
	for _, set := range [...]bool{p.Content != "", p.ToolName != "", p.ToolCallID != "", len(p.Args) > 0, len(p.Value) > 0, p.Outcome != "", len(p.Metadata) > 0} {
		if set {
			n++
		}
	}
	w := msgpackMap{enc: enc}
	w.len(n)
	w.str("part_kind", string(p.Kind))
	if p.Content != "" {
		w.str("content", p.Content)
	}
	if p.ToolName != "" {
		w.str("tool_name", p.ToolName)
	}
	if p.ToolCallID != "" {
		w.str("tool_call_id", p.ToolCallID)
	}
	if len(p.Args) > 0 {
		w.bin("args", p.Args)
	}
	if len(p.Value) > 0 {
		w.bin("value", p.Value)
	}
	if p.Outcome != "" {
		w.str("outcome", string(p.Outcome))
	}
	if len(p.Metadata) > 0 {
		w.bin("metadata", p.Metadata)
	}
	return w.err
}

// msgpackMap writes a map's entries, keeping the first error.
type msgpackMap struct {
	enc *msgpack.Encoder
	err error
}

func (w *msgpackMap) len(n int) {
	if w.err == nil {
		w.err = w.enc.EncodeMapLen(n)
	}
}

// key writes k and reports whether its value is to follow.
func (w *msgpackMap) key(k string) bool {
	if w.err == nil {
		w.err = w.enc.EncodeString(k)
	}
	return w.err == nil
}

func (w *msgpackMap) str(k, v string) {
	if w.key(k) {
		w.err = w.enc.EncodeString(v)
	}
}

func (w *msgpackMap) bin(k string, v []byte) {
	if w.key(k) {
		w.err = w.enc.EncodeBytes(v)
	}
}
