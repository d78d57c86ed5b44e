package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/msgpackmap/msgpackmaptest"
)

// reflectedEvent is Event as reflection encodes it (Event has no method,
// but a batch of them does).
type reflectedEvent Event

type reflectedBatch struct {
	Events []reflectedEvent `msgpack:"events"`
}

func reflected(events []Event) reflectedBatch {
	if events == nil {
		return reflectedBatch{}
	}
	out := reflectedBatch{Events: []reflectedEvent{}}
	for _, e := range events {
		out.Events = append(out.Events, reflectedEvent(e))
	}
	return out
}

// EventBatch's own encoding is reflection's, byte for byte, for every
// optional field of an event set or not, and for no events.
func TestEventMsgpackAsReflection(t *testing.T) {
	t.Parallel()
	for _, events := range [][]Event{nil, {}} {
		msgpackmaptest.Same(t, EventBatch{Events: events}, reflected(events))
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
	events := []Event{e, e}
	msgpackmaptest.Same(t, EventBatch{Events: events}, reflected(events))
	var back EventBatch
	if err := msgpack.Unmarshal(msgpackmaptest.Encode(t, EventBatch{Events: events}, false, true), &back); err != nil || len(back.Events) != 2 ||
		back.Events[0].ConversationID != e.ConversationID || !back.Events[0].Time.Equal(e.Time) || !bytes.Equal(back.Events[0].Data, e.Data) {
		t.Fatalf("%+v decodes as %+v, %v", e, back, err)
	}
}

// Every field of Event is written by EventBatch's encoding when set.
func TestEventMsgpackWritesEveryField(t *testing.T) {
	t.Parallel()
	e := Event{ConversationID: "c", RunID: "r", Type: "t", ToolCallID: "i", Data: json.RawMessage(`1`), Time: time.Now()}
	var got struct {
		Events []msgpack.RawMessage `msgpack:"events"`
	}
	if err := msgpack.Unmarshal(msgpackmaptest.Encode(t, EventBatch{Events: []Event{e}}, false, true), &got); err != nil || len(got.Events) != 1 {
		t.Fatalf("%+v: %v", got, err)
	}
	msgpackmaptest.EveryField(t, reflect.TypeFor[Event](), got.Events[0])
}
