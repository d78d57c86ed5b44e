package deferred_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/deferred"
)

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
		var v1 deferred.Results
		if json.Unmarshal(in, &v1) != nil {
			return
		}
		b1, err := json.Marshal(v1)
		if err != nil {
			t.Fatalf("decoded %s but cannot encode %#v: %v", in, v1, err)
		}
		var v2 deferred.Results
		if err := json.Unmarshal(b1, &v2); err != nil {
			t.Fatalf("cannot decode own encoding %s: %v", b1, err)
		}
		if diff := cmp.Diff(v1, v2, cmpOpts); diff != "" {
			t.Fatalf("round trip of %s via %s (-first +second):\n%s", in, b1, diff)
		}
		b2, err := json.Marshal(v2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("encoding not stable: %s then %s (%v)", b1, b2, err)
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
		var v1 deferred.Results
		if msgpack.Unmarshal(in, &v1) != nil {
			return
		}
		b1, err := msgpack.Marshal(v1)
		if err != nil {
			t.Fatalf("decoded but cannot encode %#v: %v", v1, err)
		}
		var v2 deferred.Results
		if err := msgpack.Unmarshal(b1, &v2); err != nil {
			t.Fatalf("cannot decode own encoding: %v", err)
		}
		if diff := cmp.Diff(v1, v2); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		b2, err := msgpack.Marshal(v2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("encoding not stable (%v)", err)
		}
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
		var v1 deferred.Requests
		if json.Unmarshal(in, &v1) != nil {
			return
		}
		b1, err := json.Marshal(v1)
		if err != nil {
			t.Fatalf("decoded %s but cannot encode: %v", in, err)
		}
		var v2 deferred.Requests
		if err := json.Unmarshal(b1, &v2); err != nil {
			t.Fatalf("cannot decode own encoding %s: %v", b1, err)
		}
		if diff := cmp.Diff(v1, v2, cmpOpts); diff != "" {
			t.Fatalf("round trip of %s via %s (-first +second):\n%s", in, b1, diff)
		}
		b2, err := json.Marshal(v2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("encoding not stable: %s then %s (%v)", b1, b2, err)
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
		var v1 deferred.Requests
		if msgpack.Unmarshal(in, &v1) != nil {
			return
		}
		b1, err := msgpack.Marshal(v1)
		if err != nil {
			t.Fatalf("decoded but cannot encode %#v: %v", v1, err)
		}
		var v2 deferred.Requests
		if err := msgpack.Unmarshal(b1, &v2); err != nil {
			t.Fatalf("cannot decode own encoding: %v", err)
		}
		if diff := cmp.Diff(v1, v2, cmpOpts); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		// Every batch that decodes from msgpack is also valid JSON.
		if _, err := json.Marshal(v1); err != nil {
			t.Fatalf("JSON encoding of a decoded batch: %v", err)
		}
	})
}
