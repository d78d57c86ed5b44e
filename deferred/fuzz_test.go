package deferred_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/deferred"
)

// codec is an encoding the fuzz tests round-trip through.
type codec struct {
	name      string
	marshal   func(any) ([]byte, error)
	unmarshal func([]byte, any) error
}

var (
	jsonCodec    = codec{"JSON", json.Marshal, json.Unmarshal}
	msgpackCodec = codec{"msgpack", msgpack.Marshal, msgpack.Unmarshal}
)

// fuzzRoundTrip decodes in with c; ok is false if it does not decode.
// Whatever decodes must re-encode to bytes that decode to an equal value
// (by opts) and, if stable, encode to the same bytes again.
func fuzzRoundTrip[T any](t *testing.T, c codec, in []byte, stable bool, opts ...cmp.Option) (v T, ok bool) {
	t.Helper()
	if c.unmarshal(in, &v) != nil {
		return v, false
	}
	b1, err := c.marshal(v)
	if err != nil {
		t.Fatalf("%s: decoded %q but cannot encode %#v: %v", c.name, in, v, err)
	}
	var v2 T
	if err := c.unmarshal(b1, &v2); err != nil {
		t.Fatalf("%s: cannot decode own encoding %q: %v", c.name, b1, err)
	}
	if diff := cmp.Diff(v, v2, opts...); diff != "" {
		t.Fatalf("%s: round trip of %q via %q (-first +second):\n%s", c.name, in, b1, diff)
	}
	if stable {
		b2, err := c.marshal(v2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("%s: encoding not stable: %q then %q (%v)", c.name, b1, b2, err)
		}
	}
	return v, true
}

var resultsJSONSeeds = []string{
	`{"approvals":{"del1":true,"upd1":false},"calls":{"job1":"done","loc1":{"city":"Berlin"}},"metadata":{"del1":{"by":"alice"}}}`,
	`{"approvals":{"a":{"kind":"tool-approved","override_args":{"path":"b.txt"}},"b":{"kind":"tool-approved","override_args":null},"c":{"kind":"tool-denied","message":"no"},"d":{"kind":"tool-denied"}}}`,
	`{"calls":{"r":{"kind":"tool-return","return_value":[1,2.50,"x"],"content":"see attached","metadata":{"n":1}},"m":{"kind":"model-retry","message":"use ISO dates"},"f":{"kind":"tool-failed","message":"timed out"},"v":null,"o":{"kind":"other"}}}`,
	`{"approvals":{},"calls":{},"metadata":{}}`,
	`{"approvals":{"x":"yes"}}`,
	`{"calls":{"c":{"kind":"tool-return"}}}`,
	`{"calls":{"c":"<&>\u2028"}}`,
}

// FuzzResultsJSON: decoding never panics, and whatever decodes re-encodes to
// a text that decodes to an equal value and encodes to the same bytes.
func FuzzResultsJSON(f *testing.F) {
	for _, s := range resultsJSONSeeds {
		f.Add([]byte(s))
	}
	for _, tt := range roundTripResults {
		if b, err := json.Marshal(tt.in); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v1, ok := fuzzRoundTrip[deferred.Results](t, jsonCodec, in, true, cmpOpts)
		if !ok {
			return
		}
		if err := (&deferred.Requests{}).Check(&v1); err == nil && (len(v1.Approvals)+len(v1.Calls)) > 0 {
			t.Fatalf("Check accepted answers for an empty batch: %s", in)
		}
	})
}

func FuzzResultsMsgpack(f *testing.F) {
	for _, tt := range roundTripResults {
		b, err := msgpack.Marshal(tt.in)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x80})
	f.Add([]byte{0xc0})
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzRoundTrip[deferred.Results](t, msgpackCodec, in, true)
	})
}

var requestsJSONSeeds = []string{
	`{"calls":[{"tool_name":"run_job","args":{"job":"x"},"tool_call_id":"job1"}],"approvals":[{"tool_name":"delete_file","args":{"path":"a.txt"},"tool_call_id":"del1"}],"metadata":{"job1":{"queue":"slow"}}}`,
	`{"calls":[],"approvals":[],"metadata":{}}`,
	`{"approvals":[{"tool_name":"now","args":null,"tool_call_id":"n"}]}`,
	`{"calls":[{"tool_name":"t","args":{"n":1.0,"s":"<b>"},"tool_call_id":"a"},{"tool_name":"t","args":{},"tool_call_id":"a"}]}`,
}

func FuzzRequestsJSON(f *testing.F) {
	for _, s := range requestsJSONSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v1, ok := fuzzRoundTrip[deferred.Requests](t, jsonCodec, in, true, cmpOpts)
		if !ok {
			return
		}
		// A decoded batch is answerable: approving everything and failing
		// every call completes it, and then nothing remains.
		calls := map[string]deferred.Result{}
		for _, c := range v1.Calls {
			calls[c.ToolCallID] = deferred.Failed{Message: "x"}
		}
		res, err := v1.BuildResults(nil, calls, nil, true)
		if err != nil {
			t.Fatalf("BuildResults: %v", err)
		}
		if err := v1.Check(res); err != nil {
			t.Fatalf("Check: %v", err)
		}
		if rest := v1.Remaining(res); rest != nil {
			t.Fatalf("Remaining: %+v", rest)
		}
	})
}

func FuzzRequestsMsgpack(f *testing.F) {
	for _, tt := range roundTripRequests {
		b, err := msgpack.Marshal(tt.in)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v1, ok := fuzzRoundTrip[deferred.Requests](t, msgpackCodec, in, false, cmpOpts)
		if !ok {
			return
		}
		// Every batch that decodes from msgpack is also valid JSON.
		if _, err := json.Marshal(v1); err != nil {
			t.Fatalf("JSON encoding of a decoded batch: %v", err)
		}
	})
}
