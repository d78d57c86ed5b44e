package agent

import (
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/msgpackmap"
)

// EncodeMsgpack writes m as msgpack's reflection would, without its
// garbage (package msgpackmap): every stored change of a conversation
// encodes its new messages. The method is on Message, not on *Part:
// reflection cannot address a Part value encoded alone, and a method on
// *Part would refuse it.
func (m Message) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := msgpackmap.Writer{Enc: enc}
	w.Len(5 + msgpackmap.Count(m.ModelName != "", m.Usage != nil))
	w.Str("kind", string(m.Kind))
	if w.Key("parts") {
		w.Err = encodeParts(enc, m.Parts)
	}
	w.Str("run_id", m.RunID)
	w.Str("conversation_id", m.ConversationID)
	w.Time("timestamp", m.Timestamp)
	if m.ModelName != "" {
		w.Str("model_name", m.ModelName)
	}
	if m.Usage != nil {
		w.Value("usage", m.Usage)
	}
	return w.Err
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
	w := msgpackmap.Writer{Enc: enc}
	w.Len(1 + msgpackmap.Count(p.Content != "", p.ToolName != "", p.ToolCallID != "", len(p.Args) > 0, len(p.Value) > 0, p.Outcome != "", len(p.Metadata) > 0))
	w.Str("part_kind", string(p.Kind))
	if p.Content != "" {
		w.Str("content", p.Content)
	}
	if p.ToolName != "" {
		w.Str("tool_name", p.ToolName)
	}
	if p.ToolCallID != "" {
		w.Str("tool_call_id", p.ToolCallID)
	}
	if len(p.Args) > 0 {
		w.Bin("args", p.Args)
	}
	if len(p.Value) > 0 {
		w.Bin("value", p.Value)
	}
	if p.Outcome != "" {
		w.Str("outcome", string(p.Outcome))
	}
	if len(p.Metadata) > 0 {
		w.Bin("metadata", p.Metadata)
	}
	return w.Err
}
