package agent

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/msgpackmap/msgpackmaptest"
)

// reflectedMessage is Message without its EncodeMsgpack: encoded by
// reflection.
type reflectedMessage Message

// Message's own encoding is reflection's, byte for byte, for every
// optional field of a message and of a part set or not; and it decodes
// back to the message.
func TestMessageMsgpackAsReflection(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)
	for i := range 1 << 7 {
		p := Part{Kind: PartToolReturn}
		for bit, set := range []func(){
			func() { p.Content = "héllo" },
			func() { p.ToolName = "read_file" },
			func() { p.ToolCallID = "call_1" },
			func() { p.Args = json.RawMessage(`{"path":"a"}`) },
			func() { p.Value = json.RawMessage(`"ok"`) },
			func() { p.Outcome = OutcomeSuccess },
			func() { p.Metadata = json.RawMessage(`{"m":1}`) },
		} {
			if i&(1<<bit) != 0 {
				set()
			}
		}
		m := Message{Kind: KindRequest, Parts: []Part{p, {Kind: PartText}}, RunID: "r1", ConversationID: "c1", Timestamp: at}
		if i&1 != 0 {
			m.ModelName, m.Usage = "gpt", &Usage{Requests: 1, InputTokens: 300, OutputTokens: 70000, ToolCalls: 2}
		}
		if i&2 != 0 {
			m.Parts = nil
		}
		if i&4 != 0 {
			m.Parts, m.Timestamp = []Part{}, time.Time{}
		}
		checkMessageEncoding(t, m)
	}
}

func FuzzMessageMsgpackAsReflection(f *testing.F) {
	f.Add("request", "user-prompt", "hi", "", "", []byte(nil), []byte(nil), "", "gpt", int64(1764842400123456789), int64(12))
	f.Fuzz(func(t *testing.T, kind, partKind, content, tool, call string, args, value []byte, outcome, model string, nanos, tokens int64) {
		m := Message{Kind: MessageKind(kind), RunID: call, ConversationID: tool, Timestamp: time.Unix(0, nanos).UTC(), ModelName: model,
			Parts: []Part{{Kind: PartKind(partKind), Content: content, ToolName: tool, ToolCallID: call, Args: args, Value: value, Outcome: Outcome(outcome)}}}
		if tokens != 0 {
			m.Usage = &Usage{InputTokens: tokens, OutputTokens: -tokens}
		}
		checkMessageEncoding(t, m)
	})
}

func checkMessageEncoding(t *testing.T, m Message) {
	t.Helper()
	msgpackmaptest.Same(t, []Message{m}, []reflectedMessage{reflectedMessage(m)})
	msgpackmaptest.Same(t, m, reflectedMessage(m))
	var back Message
	if err := msgpack.Unmarshal(msgpackmaptest.Encode(t, &m, false, false), &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(m, back, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }), cmp.Comparer(func(a, b json.RawMessage) bool { return bytes.Equal(a, b) })); d != "" && !(len(m.Parts) == 0 && len(back.Parts) == 0) {
		t.Fatalf("decoded back (-sent +got):\n%s", d)
	}
}

// Every stored field of Message and Part is written by the encoding when
// set.
func TestMessageMsgpackWritesEveryField(t *testing.T) {
	t.Parallel()
	m := Message{Kind: KindResponse, RunID: "r", ConversationID: "c", Timestamp: time.Now(), ModelName: "m", Usage: &Usage{},
		Parts: []Part{{Kind: PartToolReturn, Content: "c", ToolName: "t", ToolCallID: "i", Args: json.RawMessage(`1`), Value: json.RawMessage(`2`),
			Outcome: OutcomeSuccess, Metadata: json.RawMessage(`3`)}}}
	enc := msgpackmaptest.Encode(t, m, false, false)
	msgpackmaptest.EveryField(t, reflect.TypeFor[Message](), enc)
	var parts struct {
		Parts []msgpack.RawMessage `msgpack:"parts"`
	}
	if err := msgpack.Unmarshal(enc, &parts); err != nil || len(parts.Parts) != 1 {
		t.Fatalf("parts of %x: %v", enc, err)
	}
	msgpackmaptest.EveryField(t, reflect.TypeFor[Part](), parts.Parts[0])
}
