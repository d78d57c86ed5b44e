package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// reflectedEvent is Event without its EncodeMsgpack: encoded by reflection.
type reflectedEvent Event

type reflectedBatch struct {
	Events []reflectedEvent `msgpack:"events"`
}

// EventBatch's own encoding is reflection's, byte for byte, for every
// optional field of an event set or not, and for no events.
func TestEventMsgpackAsReflection(t *testing.T) {
	t.Parallel()
	for _, events := range [][]Event{nil, {}} {
		var refl []reflectedEvent
		if events != nil {
			refl = []reflectedEvent{}
		}
		if got, want := encodeWith(t, false, EventBatch{Events: events}), encodeWith(t, false, reflectedBatch{Events: refl}); !bytes.Equal(got, want) {
			t.Errorf("%#v encodes as %x; reflection gives %x", events, got, want)
		}
	}
	for i := range 16 {
		e := Event{ConversationID: "c1", Type: "tool_call", Time: time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)}
		if i&1 != 0 {
			e.RunID = "r1_c1"
		}
		if i&2 != 0 {
			e.ToolCallID = "call_ü"
		}
		if i&4 != 0 {
			e.Data = json.RawMessage(`{"kind":"tool_call","part":{"args":{"x":1}}}`)
		}
		if i&8 != 0 {
			e.Time, e.ConversationID, e.Type = time.Time{}, "", ""
		}
		checkEventEncoding(t, e)
	}
}

func FuzzEventMsgpackAsReflection(f *testing.F) {
	f.Add("c1", "r1", "run_started", "call_1", []byte(`{"a":1}`), int64(1764842400123456789))
	f.Add("", "", "", "", []byte(nil), int64(0))
	f.Fuzz(func(t *testing.T, conv, run, typ, call string, data []byte, nanos int64) {
		checkEventEncoding(t, Event{ConversationID: conv, RunID: run, Type: typ, ToolCallID: call, Data: data, Time: time.Unix(0, nanos).UTC()})
	})
}

func checkEventEncoding(t *testing.T, e Event) {
	t.Helper()
	for _, compact := range []bool{false, true} {
		got, want := encodeWith(t, compact, EventBatch{Events: []Event{e, e}}), encodeWith(t, compact, reflectedBatch{Events: []reflectedEvent{reflectedEvent(e), reflectedEvent(e)}})
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v in a batch encodes as\n%x\nreflection gives\n%x", e, got, want)
		}
	}
	var back EventBatch
	if err := msgpack.Unmarshal(encodeWith(t, false, EventBatch{Events: []Event{e}}), &back); err != nil || len(back.Events) != 1 ||
		back.Events[0].ConversationID != e.ConversationID || !back.Events[0].Time.Equal(e.Time) || !bytes.Equal(back.Events[0].Data, e.Data) {
		t.Fatalf("%+v decodes as %+v, %v", e, back, err)
	}
}

func encodeWith(t *testing.T, compactInts bool, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(compactInts)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Every field of Event is written by EventBatch's encoding when set: a
// field added to Event and not to it fails here.
func TestEventMsgpackWritesEveryField(t *testing.T) {
	t.Parallel()
	e := Event{ConversationID: "c", RunID: "r", Type: "t", ToolCallID: "i", Data: json.RawMessage(`1`), Time: time.Now()}
	var got struct {
		Events []map[string]msgpack.RawMessage `msgpack:"events"`
	}
	if err := msgpack.Unmarshal(encodeWith(t, false, EventBatch{Events: []Event{e}}), &got); err != nil {
		t.Fatal(err)
	}
	for f := range reflect.TypeFor[Event]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		if _, ok := got.Events[0][name]; !ok && f.IsExported() && name != "-" {
			t.Errorf("Event.%s (%q) set is not written by EventBatch's EncodeMsgpack", f.Name, name)
		}
	}
}
