package deferred_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/deferred"
)

var roundTripResults = []struct {
	name string
	in   deferred.Results
}{
	{"empty", deferred.Results{}},
	{"approved", deferred.Results{Approvals: map[string]deferred.Decision{"a": deferred.Approved{}}}},
	{"approved with override", deferred.Results{Approvals: map[string]deferred.Decision{
		"a": deferred.Approved{OverrideArgs: raw(`{"path":"b.txt","n":1.50,"big":12345678901234567890}`)},
	}}},
	{"denied default", deferred.Results{Approvals: map[string]deferred.Decision{"a": deferred.Denied{Message: deferred.DefaultDenyMessage}}}},
	{"denied custom", deferred.Results{Approvals: map[string]deferred.Decision{"a": deferred.Denied{Message: "not on Fridays <ok>"}}}},
	{"denied empty message", deferred.Results{Approvals: map[string]deferred.Decision{"a": deferred.Denied{}}}},
	{"value string", deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Value{Value: raw(`"Berlin"`)}}}},
	{"value number literal", deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Value{Value: raw(`1.0`)}}}},
	{"value null", deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Value{Value: raw(`null`)}}}},
	{"value object with other kind", deferred.Results{Calls: map[string]deferred.Result{
		"c": deferred.Value{Value: raw(`{"kind":"retry-prompt","message":"x"}`)},
	}}},
	{"value array", deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Value{Value: raw(`[1,"two",{"three":3}]`)}}}},
	{"value bool", deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Value{Value: raw(`true`)}}}},
	{"return full", deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Return{
		Value: raw(`{"order":17}`), Content: "Receipt attached", Metadata: raw(`{"shop":"acme","cents":1999}`),
	}}}},
	{"return value only", deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Return{Value: raw(`42`)}}}},
	{"return of ambiguous value", deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Return{
		Value: raw(`{"kind":"tool-failed","message":"this is data"}`),
	}}}},
	{"retry", deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Retry{Message: "use ISO dates"}}}},
	{"failed", deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Failed{Message: "timed out"}}}},
	{"everything", deferred.Results{
		Approvals: map[string]deferred.Decision{
			"a1": deferred.Approved{},
			"a2": deferred.Approved{OverrideArgs: raw(`{"path":"safe.txt"}`)},
			"a3": deferred.Denied{Message: "no"},
		},
		Calls: map[string]deferred.Result{
			"c1": deferred.Value{Value: raw(`"ok"`)},
			"c2": deferred.Return{Value: raw(`1`), Content: "more", Metadata: raw(`[1]`)},
			"c3": deferred.Retry{Message: "again"},
			"c4": deferred.Failed{Message: "boom"},
		},
		Metadata: map[string]json.RawMessage{"a1": raw(`{"by":"alice"}`), "a2": raw(`"plain"`)},
	}},
}

func TestResultsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tt := range roundTripResults {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gotJSON, b := roundTripJSON(t, tt.in)
			if diff := cmp.Diff(tt.in, gotJSON, cmpOpts); diff != "" {
				t.Errorf("JSON round trip via %s (-want +got):\n%s", b, diff)
			}
			gotMsgpack, _ := roundTripMsgpack(t, tt.in)
			// msgpack keeps JSON text byte for byte and nil maps as nil.
			if diff := cmp.Diff(tt.in, gotMsgpack); diff != "" {
				t.Errorf("msgpack round trip (-want +got):\n%s", diff)
			}
			// A *Results inside another value encodes the same way.
			type wrapper struct {
				R *deferred.Results `json:"r" msgpack:"r"`
			}
			gotWrapped, _ := roundTripMsgpack(t, wrapper{R: &tt.in})
			if diff := cmp.Diff(tt.in, *gotWrapped.R); diff != "" {
				t.Errorf("nested msgpack round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResultsMsgpackDeterministic(t *testing.T) {
	t.Parallel()
	in := roundTripResults[len(roundTripResults)-1].in
	first, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := msgpack.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(first) {
			t.Fatal("equal Results encoded to different bytes")
		}
	}
}

func TestResultsUnmarshalJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want deferred.Results
	}{
		{"true is approved", `{"approvals":{"a":true}}`,
			deferred.Results{Approvals: map[string]deferred.Decision{"a": deferred.Approved{}}}},
		{"false is denied with the default message", `{"approvals":{"a":false}}`,
			deferred.Results{Approvals: map[string]deferred.Decision{"a": deferred.Denied{Message: deferred.DefaultDenyMessage}}}},
		{"tool-approved null override", `{"approvals":{"a":{"kind":"tool-approved","override_args":null}}}`,
			deferred.Results{Approvals: map[string]deferred.Decision{"a": deferred.Approved{}}}},
		{"tool-approved override", `{"approvals":{"a":{"override_args":{"x": 1},"kind":"tool-approved"}}}`,
			deferred.Results{Approvals: map[string]deferred.Decision{"a": deferred.Approved{OverrideArgs: raw(`{"x": 1}`)}}}},
		{"tool-denied without message", `{"approvals":{"a":{"kind":"tool-denied"}}}`,
			deferred.Results{Approvals: map[string]deferred.Decision{"a": deferred.Denied{Message: deferred.DefaultDenyMessage}}}},
		{"tool-denied", `{"approvals":{"a":{"kind":"tool-denied","message":"not today"}}}`,
			deferred.Results{Approvals: map[string]deferred.Decision{"a": deferred.Denied{Message: "not today"}}}},
		{"plain values", `{"calls":{"s":"Berlin","n":3,"z":null,"o":{"kind":"other"},"k":{"Kind":"tool-return"}}}`,
			deferred.Results{Calls: map[string]deferred.Result{
				"s": deferred.Value{Value: raw(`"Berlin"`)},
				"n": deferred.Value{Value: raw(`3`)},
				"z": deferred.Value{Value: raw(`null`)},
				"o": deferred.Value{Value: raw(`{"kind":"other"}`)},
				"k": deferred.Value{Value: raw(`{"Kind":"tool-return"}`)},
			}}},
		{"tool-return", `{"calls":{"c":{"kind":"tool-return","return_value":{"id":7},"content":"see","metadata":{"m":1}}}}`,
			deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Return{Value: raw(`{"id":7}`), Content: "see", Metadata: raw(`{"m":1}`)}}}},
		{"tool-return with nulls", `{"calls":{"c":{"kind":"tool-return","return_value":null,"content":null,"metadata":null}}}`,
			deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Return{Value: raw(`null`)}}}},
		{"model-retry", `{"calls":{"c":{"kind":"model-retry","message":"again"}}}`,
			deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Retry{Message: "again"}}}},
		{"tool-failed", `{"calls":{"c":{"kind":"tool-failed","message":"boom"}}}`,
			deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Failed{Message: "boom"}}}},
		{"metadata", `{"metadata":{"a":{"by":"bob"}}}`,
			deferred.Results{Metadata: map[string]json.RawMessage{"a": raw(`{"by":"bob"}`)}}},
		{"nulls", `{"approvals":null,"calls":null,"metadata":null}`, deferred.Results{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got deferred.Results
			if err := json.Unmarshal([]byte(tt.in), &got); err != nil {
				t.Fatalf("unmarshal: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, cmpOpts); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestResultsUnmarshalJSONErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		wantID  string // the id an *InvalidAnswerError must name; empty: any error
		wantErr string
	}{
		{"string approval", `{"approvals":{"del1":"yes"}}`, "del1", "not a decision"},
		{"null approval", `{"approvals":{"del1":null}}`, "del1", "not a decision"},
		{"number approval", `{"approvals":{"del1":1}}`, "del1", "not a decision"},
		{"object of another kind", `{"approvals":{"del1":{"kind":"tool-return","return_value":1}}}`, "del1", "not a decision"},
		{"object without kind", `{"approvals":{"del1":{"approved":true}}}`, "del1", "not a decision"},
		{"override not an object", `{"approvals":{"a":{"kind":"tool-approved","override_args":[1]}}}`, "a", "not a JSON object"},
		{"unknown field in decision", `{"approvals":{"a":{"kind":"tool-denied","message":"x","extra":1}}}`, "a", "unknown field"},
		{"denied message not a string", `{"approvals":{"a":{"kind":"tool-denied","message":5}}}`, "a", "not a string"},
		{"return without value", `{"calls":{"c":{"kind":"tool-return","content":"x"}}}`, "c", "return_value is missing"},
		{"return content not a string", `{"calls":{"c":{"kind":"tool-return","return_value":1,"content":[]}}}`, "c", "not a string"},
		{"return unknown field", `{"calls":{"c":{"kind":"tool-return","return_value":1,"extra":1}}}`, "c", "unknown field"},
		{"retry without message", `{"calls":{"c":{"kind":"model-retry"}}}`, "c", "message is missing"},
		{"failed message null", `{"calls":{"c":{"kind":"tool-failed","message":null}}}`, "c", "message is missing"},
		{"unknown top-level field", `{"approvals":{},"extra":{}}`, "", "unknown field"},
		{"not an object", `[1]`, "", ""},
		{"approvals not an object", `{"approvals":[true]}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got deferred.Results
			err := json.Unmarshal([]byte(tt.in), &got)
			if err == nil {
				t.Fatalf("unmarshal %s: no error, got %#v", tt.in, got)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
			if tt.wantID == "" {
				return
			}
			var ia *deferred.InvalidAnswerError
			if !errors.As(err, &ia) || ia.ToolCallID != tt.wantID {
				t.Errorf("error %v: want *InvalidAnswerError for %q", err, tt.wantID)
			}
			if !strings.Contains(err.Error(), tt.wantID) {
				t.Errorf("error %q does not name %q", err, tt.wantID)
			}
		})
	}
}

func TestResultsMarshalErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      deferred.Results
		wantErr string
	}{
		{"nil decision", deferred.Results{Approvals: map[string]deferred.Decision{"a": nil}}, "decision is nil"},
		{"pointer decision", deferred.Results{Approvals: map[string]deferred.Decision{"a": &deferred.Approved{}}}, "not a decision"},
		{"override not an object", deferred.Results{Approvals: map[string]deferred.Decision{"a": deferred.Approved{OverrideArgs: raw(`"x"`)}}}, "not a JSON object"},
		{"nil result", deferred.Results{Calls: map[string]deferred.Result{"c": nil}}, "result is nil"},
		{"pointer result", deferred.Results{Calls: map[string]deferred.Result{"c": &deferred.Retry{}}}, "not a result"},
		{"invalid value", deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Value{Value: raw(`{`)}}}, "not valid JSON"},
		{"ambiguous value", deferred.Results{Calls: map[string]deferred.Result{"c": deferred.Value{Value: raw(`{"kind":"model-retry","message":"x"}`)}}}, "send it as a Return"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := json.Marshal(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("json: error %v, want one containing %q", err, tt.wantErr)
			}
			if tt.name == "ambiguous value" {
				// msgpack has an explicit kind, so the value is fine there.
				return
			}
			_, err = msgpack.Marshal(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("msgpack: error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestResultsMsgpackDecodeErrors(t *testing.T) {
	t.Parallel()
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	type m = map[string]any
	tests := []struct {
		name    string
		in      []byte
		wantErr string
	}{
		{"unknown decision kind", enc(m{"approvals": m{"a": m{"kind": "maybe"}}}), "not a decision"},
		{"bool approval", enc(m{"approvals": m{"a": true}}), "decode results"},
		{"approved with message", enc(m{"approvals": m{"a": m{"kind": "tool-approved", "message": "x"}}}), "has a message"},
		{"override not JSON", enc(m{"approvals": m{"a": m{"kind": "tool-approved", "override_args": []byte("{")}}}), "not a JSON object"},
		{"unknown result kind", enc(m{"calls": m{"c": m{"kind": "retry-prompt"}}}), "unknown result kind"},
		{"value not JSON", enc(m{"calls": m{"c": m{"kind": "value", "value": []byte("nope")}}}), "not valid JSON"},
		{"value with content", enc(m{"calls": m{"c": m{"kind": "value", "value": []byte("1"), "content": "x"}}}), "use kind tool-return"},
		{"retry with value", enc(m{"calls": m{"c": m{"kind": "model-retry", "value": []byte("1")}}}), "has a value"},
		{"metadata not JSON", enc(m{"metadata": m{"a": []byte("{")}}), "not valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got deferred.Results
			err := msgpack.Unmarshal(tt.in, &got)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

var roundTripRequests = []struct {
	name string
	in   deferred.Requests
}{
	{"empty", deferred.Requests{}},
	{"calls and approvals", deferred.Requests{
		Calls: []deferred.Call{
			{ToolName: "run_job", Args: raw(`{"job":"x","weight":2.50}`), ToolCallID: "job1"},
			{ToolName: "get_location", Args: raw(`{"precision":"city"}`), ToolCallID: "loc1"},
		},
		Approvals: []deferred.Call{
			{ToolName: "delete_file", Args: raw(`{"path":"a.txt"}`), ToolCallID: "del1"},
			{ToolName: "update_file", Args: raw(`{"path":".env","content":"<x & y>"}`), ToolCallID: "upd1"},
		},
		Metadata: map[string]json.RawMessage{"upd1": raw(`{"reason":"protected"}`), "job1": raw(`{"queue":"slow"}`)},
	}},
	{"empty args", deferred.Requests{Approvals: []deferred.Call{{ToolName: "now", Args: raw(`{}`), ToolCallID: "n1"}}}},
}

func TestRequestsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tt := range roundTripRequests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			gotJSON, b := roundTripJSON(t, tt.in)
			if diff := cmp.Diff(tt.in, gotJSON, cmpOpts); diff != "" {
				t.Errorf("JSON round trip via %s (-want +got):\n%s", b, diff)
			}
			gotMsgpack, _ := roundTripMsgpack(t, tt.in)
			if diff := cmp.Diff(tt.in, gotMsgpack); diff != "" {
				t.Errorf("msgpack round trip (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRequestsJSONShape(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(deferred.Requests{Approvals: []deferred.Call{{ToolName: "t", ToolCallID: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"calls":[],"approvals":[{"tool_name":"t","args":{},"tool_call_id":"a"}],"metadata":{}}`
	if string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	b, err = json.Marshal(deferred.Results{})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"approvals":{},"calls":{},"metadata":{}}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
}

func TestRequestsDecodeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"empty id", `{"calls":[{"tool_name":"t","args":{},"tool_call_id":""}]}`, "tool_call_id is empty"},
		{"empty tool name", `{"calls":[{"tool_name":"","args":{},"tool_call_id":"c"}]}`, "tool_name is empty"},
		{"duplicate across lists", `{"calls":[{"tool_name":"t","args":{},"tool_call_id":"x"}],"approvals":[{"tool_name":"u","args":{},"tool_call_id":"x"}]}`, "duplicate tool_call_id \"x\""},
		{"args not an object", `{"calls":[{"tool_name":"t","args":"{}","tool_call_id":"c"}]}`, "not a JSON object"},
		{"metadata for unknown id", `{"calls":[],"metadata":{"ghost":{}}}`, "ghost"},
		{"unknown field", `{"calls":[],"pending":[]}`, "unknown field"},
		{"unknown call field", `{"calls":[{"tool_name":"t","args":{},"tool_call_id":"c","extra":1}]}`, "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got deferred.Requests
			err := json.Unmarshal([]byte(tt.in), &got)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("json: error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	t.Run("msgpack args not JSON", func(t *testing.T) {
		t.Parallel()
		b, err := msgpack.Marshal(map[string]any{"calls": []any{map[string]any{"tool_name": "t", "tool_call_id": "c", "args": []byte("{x")}}})
		if err != nil {
			t.Fatal(err)
		}
		var got deferred.Requests
		if err := msgpack.Unmarshal(b, &got); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
			t.Errorf("error %v, want one about args", err)
		}
	})
	t.Run("null args become {}", func(t *testing.T) {
		t.Parallel()
		var got deferred.Requests
		if err := json.Unmarshal([]byte(`{"calls":[{"tool_name":"t","args":null,"tool_call_id":"c"},{"tool_name":"t","tool_call_id":"d"}]}`), &got); err != nil {
			t.Fatal(err)
		}
		for _, c := range got.Calls {
			if string(c.Args) != "{}" {
				t.Errorf("%s: args %s, want {}", c.ToolCallID, c.Args)
			}
		}
	})
}
