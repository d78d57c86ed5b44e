package worker_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

func TestParseResult(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		out  string
		want wire.CallReply
	}{
		{"empty is null", "  \n", wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`null`)}},
		{"number", "42\n", wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`42`)}},
		{"object compacted", `{"a": 1,  "b": [1, 2]}`, wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`{"a":1,"b":[1,2]}`)}},
		{"json string", `"hi"`, wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"hi"`)}},
		{"plain text", "File 'a' deleted\n", wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"File 'a' deleted"`)}},
		{"text with quotes", `say "x"`, wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"say \"x\""`)}},
		{
			"tool-return",
			`{"kind":"tool-return","return_value":{"n":1},"content":"see this","metadata":{"m":true}}`,
			wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`{"n":1}`), Content: "see this", Metadata: json.RawMessage(`{"m":true}`)},
		},
		{
			"tool-return without value or metadata",
			`{"kind":"tool-return","metadata":null}`,
			wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`null`)},
		},
		{
			"tool-return with list content",
			`{"kind":"tool-return","return_value":1,"content":["a","b"]}`,
			wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`1`), Content: `["a","b"]`},
		},
		{"model-retry", `{"kind":"model-retry","message":"try 2"}`, wire.CallReply{Outcome: wire.OutcomeRetry, Message: "try 2"}},
		{"tool-failed", `{"kind":"tool-failed","message":"boom"}`, wire.CallReply{Outcome: wire.OutcomeFailed, Message: "boom"}},
		{"other kind is a value", `{"kind":"other","x":1}`, wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`{"kind":"other","x":1}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := worker.ParseResult([]byte(tt.out))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseResult(%q) (-want +got):\n%s", tt.out, diff)
			}
		})
	}
}

func TestSplitWords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{in: "tool --flag value", want: []string{"tool", "--flag", "value"}},
		{in: "  spaced \t out\n", want: []string{"spaced", "out"}},
		{in: `sh -c 'echo "$X" | wc -c'`, want: []string{"sh", "-c", `echo "$X" | wc -c`}},
		{in: `a "b c" d`, want: []string{"a", "b c", "d"}},
		{in: `"x \"y\" \\ \$z \n"`, want: []string{`x "y" \ $z \n`}},
		{in: `one\ word`, want: []string{"one word"}},
		{in: `a''b ""`, want: []string{"ab", ""}},
		{in: `"a"'b'c`, want: []string{"abc"}},
		{in: ``, want: nil},
		{in: `'open`, wantErr: true},
		{in: `"open`, wantErr: true},
		{in: `trailing\`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := worker.SplitWords(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("SplitWords(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("SplitWords(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}
