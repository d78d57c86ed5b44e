package bus_test

import (
	"testing"

	"github.com/toolgate/toolgate/internal/bus"
)

// fuzzDecode checks that decoding never panics in either encoding and that
// whatever decodes (and so validates) can be encoded again in both.
func fuzzDecode[T any](f *testing.F, seeds ...T) {
	for _, s := range seeds {
		for _, ct := range []string{bus.ContentTypeMsgpack, bus.ContentTypeJSON} {
			data, err := bus.Encode(s, ct)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data, ct == bus.ContentTypeJSON)
		}
	}
	f.Add([]byte{0xde, 0xff, 0xff}, false)             // map16 with no entries behind it
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, false) // array32 header alone
	f.Add([]byte(`{"args":{"a":`), true)
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		ct := bus.ContentTypeMsgpack
		if asJSON {
			ct = bus.ContentTypeJSON
		}
		var v T
		if err := bus.Decode(data, ct, &v); err != nil {
			return
		}
		for _, out := range []string{bus.ContentTypeMsgpack, bus.ContentTypeJSON} {
			again, err := bus.Encode(v, out)
			if err != nil {
				t.Fatalf("decoded %+v but cannot encode it as %s: %v", v, out, err)
			}
			var w T
			if err := bus.Decode(again, out, &w); err != nil {
				t.Fatalf("re-encoded %s does not decode: %v", out, err)
			}
		}
	})
}

func FuzzDecodeCallRequest(f *testing.F)     { fuzzDecode(f, sampleCall("run1", "c1")) }
func FuzzDecodeApprovalRequest(f *testing.F) { fuzzDecode(f, sampleApproval("run1", "c1")) }
func FuzzDecodeCallReply(f *testing.F)       { fuzzDecode(f, sampleReply("run1", "c1")) }
func FuzzDecodeDecision(f *testing.F)        { fuzzDecode(f, sampleDecision("run1", "c1")) }
func FuzzDecodeEvent(f *testing.F) {
	fuzzDecode(f, bus.Event{ConversationID: "conv1", Type: "x", Time: deadline})
}
func FuzzDecodeEventBatch(f *testing.F) {
	fuzzDecode(f, bus.EventBatch{Events: []bus.Event{
		{ConversationID: "conv1", Type: "run_started", Time: deadline},
		{ConversationID: "conv1", RunID: "run1", Type: "tool_call", ToolCallID: "c1", Time: deadline},
	}})
}
