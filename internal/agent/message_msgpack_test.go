package agent

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"
)

// reflectedMessage is Message without its EncodeMsgpack: encoded by
// reflection.
type reflectedMessage Message

// Message's own encoding is reflection's, byte for byte, for every
// optional field of a message and of a part set or not, with and without
// compact ints; and it decodes back to the message.
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
	for _, compact := range []bool{false, true} {
		if got, want := encodeMsgpack(t, compact, []Message{m}), encodeMsgpack(t, compact, []reflectedMessage{reflectedMessage(m)}); !bytes.Equal(got, want) {
			t.Fatalf("%+v encodes as\n%x\nreflection gives\n%x", m, got, want)
		}
		if got, want := encodeMsgpack(t, compact, m), encodeMsgpack(t, compact, reflectedMessage(m)); !bytes.Equal(got, want) {
			t.Fatalf("%+v alone encodes as\n%x\nreflection gives\n%x", m, got, want)
		}
	}
	var back Message
	if err := msgpack.Unmarshal(encodeMsgpack(t, false, &m), &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(m, back, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) }), cmp.Comparer(func(a, b json.RawMessage) bool { return bytes.Equal(a, b) })); d != "" && !(len(m.Parts) == 0 && len(back.Parts) == 0) {
		t.Fatalf("decoded back (-sent +got):\n%s", d)
	}
}

func encodeMsgpack(t *testing.T, compactInts bool, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(compactInts)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Every stored field of Message and Part is written by the encoding when
// set: a field added to either struct and not to it fails here.
func TestMessageMsgpackWritesEveryField(t *testing.T) {
	t.Parallel()
	m := Message{Kind: KindResponse, RunID: "r", ConversationID: "c", Timestamp: time.Now(), ModelName: "m", Usage: &Usage{},
		Parts: []Part{{Kind: PartToolReturn, Content: "c", ToolName: "t", ToolCallID: "i", Args: json.RawMessage(`1`), Value: json.RawMessage(`2`),
			Outcome: OutcomeSuccess, Metadata: json.RawMessage(`3`)}}}
	var got struct {
		Message map[string]msgpack.RawMessage   `msgpack:"m"`
		Parts   []map[string]msgpack.RawMessage `msgpack:"p"`
	}
	enc := encodeMsgpack(t, false, m)
	if err := msgpack.Unmarshal(enc, &got.Message); err != nil {
		t.Fatal(err)
	}
	if err := msgpack.Unmarshal(got.Message["parts"], &got.Parts); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ reflect.Type
		m   map[string]msgpack.RawMessage
	}{{reflect.TypeFor[Message](), got.Message}, {reflect.TypeFor[Part](), got.Parts[0]}} {
		for f := range c.typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
			if _, ok := c.m[name]; !ok && f.IsExported() && name != "-" {
				t.Errorf("%s.%s (%q) set is not written by Message's EncodeMsgpack", c.typ.Name(), f.Name, name)
			}
		}
	}
}
