package wire_test

import (
	"testing"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

// fuzzDecode checks that decoding never panics in either encoding and that
// whatever decodes (and so validates) can be encoded again in both.
func fuzzDecode[T any](f *testing.F, seeds ...T) {
	for _, s := range seeds {
		for _, ct := range []string{wire.ContentTypeMsgpack, wire.ContentTypeJSON} {
			data, err := wire.Encode(s, ct)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data, ct == wire.ContentTypeJSON)
		}
	}
	f.Add([]byte{0xde, 0xff, 0xff}, false)             // map16 with no entries behind it
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}, false) // array32 header alone
	f.Add([]byte(`{"args":{"a":`), true)
	f.Fuzz(func(t *testing.T, data []byte, asJSON bool) {
		ct := wire.ContentTypeMsgpack
		if asJSON {
			ct = wire.ContentTypeJSON
		}
		var v T
		if err := wire.Decode(data, ct, &v); err != nil {
			return
		}
		for _, out := range []string{wire.ContentTypeMsgpack, wire.ContentTypeJSON} {
			again, err := wire.Encode(v, out)
			if err != nil {
				t.Fatalf("decoded %+v but cannot encode it as %s: %v", v, out, err)
			}
			var w T
			if err := wire.Decode(again, out, &w); err != nil {
				t.Fatalf("re-encoded %s does not decode: %v", out, err)
			}
		}
	})
}

func FuzzDecodeCallRequest(f *testing.F)     { fuzzDecode(f, bustest.SampleCall("run1", "c1")) }
func FuzzDecodeApprovalRequest(f *testing.F) { fuzzDecode(f, bustest.SampleApproval("run1", "c1")) }
func FuzzDecodeCallReply(f *testing.F)       { fuzzDecode(f, bustest.SampleReply("run1", "c1")) }
func FuzzDecodeDecision(f *testing.F)        { fuzzDecode(f, bustest.SampleDecision("run1", "c1")) }
func FuzzDecodeEvent(f *testing.F) {
	fuzzDecode(f, wire.Event{ConversationID: "conv1", Type: "x", Time: bustest.SampleDeadline})
}
func FuzzDecodeEventBatch(f *testing.F) {
	fuzzDecode(f, wire.EventBatch{Events: []wire.Event{
		{ConversationID: "conv1", Type: "run_started", Time: bustest.SampleDeadline},
		{ConversationID: "conv1", RunID: "run1", Type: "tool_call", ToolCallID: "c1", Time: bustest.SampleDeadline},
	}})
}
