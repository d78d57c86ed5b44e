package wire_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

// TestDecodeAllocs: decoding a body that holds no string or slice takes no
// memory: the decoder and its reader are used again, not made per message.
func TestDecodeAllocs(t *testing.T) {
	type counts struct {
		N     int  `msgpack:"n"`
		Done  bool `msgpack:"done"`
		Tries int  `msgpack:"tries"`
	}
	body, err := msgpack.Marshal(counts{N: 7, Done: true, Tries: 3})
	if err != nil {
		t.Fatal(err)
	}
	var got counts
	n := testing.AllocsPerRun(100, func() {
		if err := wire.Decode(body, wire.ContentTypeMsgpack, &got); err != nil {
			t.Fatal(err)
		}
	})
	if raceEnabled {
		n = 0
	}
	if n != 0 || got != (counts{N: 7, Done: true, Tries: 3}) {
		t.Errorf("decode: %v allocations, got %+v; want 0, the message", n, got)
	}
}

// TestDecodeKeepsNothingShared: what one decode returns does not change
// when the decoder it used decodes the next body.
func TestDecodeKeepsNothingShared(t *testing.T) {
	a, b := bustest.SampleCall("run1", "c1"), bustest.SampleCall("run2", "c2")
	b.ToolName, b.Args = "other_tool", []byte(`{"q":"something else entirely"}`)
	bodyA, err := wire.Encode(a, "")
	if err != nil {
		t.Fatal(err)
	}
	bodyB, err := wire.Encode(b, "")
	if err != nil {
		t.Fatal(err)
	}
	var gotA, gotB wire.CallRequest
	if err := wire.Decode(bodyA, "", &gotA); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := wire.Decode(bodyB, "", &gotB); err != nil {
			t.Fatal(err)
		}
	}
	clear(bodyA)
	if diff := cmp.Diff(a, gotA); diff != "" {
		t.Errorf("first message after more decodes (-sent +decoded):\n%s", diff)
	}
	if diff := cmp.Diff(b, gotB); diff != "" {
		t.Errorf("second message (-sent +decoded):\n%s", diff)
	}
}
