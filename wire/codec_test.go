package wire_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

func wireSamples() []any {
	return []any{
		bustest.SampleCall("run1", "c1"),
		bustest.SampleApproval("run1", "c2"),
		bustest.SampleReply("run1", "c3"),
		bustest.SampleDecision("run1", "c4"),
		wire.Event{ConversationID: "conv1", RunID: "run1", Type: "tool_call", ToolCallID: "c1", Data: json.RawMessage(`{"x":[1,2.5,"s"]}`), Time: bustest.SampleDeadline},
	}
}

func roundTrip(t *testing.T, v any, ct string) any {
	t.Helper()
	data, err := wire.Encode(v, ct)
	if err != nil {
		t.Fatalf("encode %T as %q: %v", v, ct, err)
	}
	var out any
	switch v.(type) {
	case wire.CallRequest:
		var r wire.CallRequest
		err, out = wire.Decode(data, ct, &r), &r
	case wire.ApprovalRequest:
		var r wire.ApprovalRequest
		err, out = wire.Decode(data, ct, &r), &r
	case wire.CallReply:
		var r wire.CallReply
		err, out = wire.Decode(data, ct, &r), &r
	case wire.Decision:
		var r wire.Decision
		err, out = wire.Decode(data, ct, &r), &r
	case wire.Event:
		var r wire.Event
		err, out = wire.Decode(data, ct, &r), &r
	default:
		t.Fatalf("no case for %T", v)
	}
	if err != nil {
		t.Fatalf("decode %T as %q: %v", v, ct, err)
	}
	return out
}

func TestCodecRoundTrip(t *testing.T) {
	t.Parallel()
	for _, ct := range []string{"", wire.ContentTypeMsgpack, wire.ContentTypeJSON, "application/json; charset=utf-8"} {
		for _, v := range wireSamples() {
			got := roundTrip(t, v, ct)
			// Raw JSON values keep their exact text (numbers included).
			if diff := cmp.Diff(v, deref(got)); diff != "" {
				t.Errorf("%T via %q (-want +got):\n%s", v, ct, diff)
			}
		}
	}
}

func deref(v any) any {
	switch v := v.(type) {
	case *wire.CallRequest:
		return *v
	case *wire.ApprovalRequest:
		return *v
	case *wire.CallReply:
		return *v
	case *wire.Decision:
		return *v
	case *wire.Event:
		return *v
	}
	return v
}

func TestCodecIsMsgpackByDefault(t *testing.T) {
	t.Parallel()
	data, err := wire.Encode(bustest.SampleReply("run1", "c1"), "")
	if err != nil {
		t.Fatal(err)
	}
	if json.Valid(data) {
		t.Error("default encoding is JSON")
	}
	if data[0]&0xf0 != 0x80 {
		t.Errorf("first byte %#x is not a msgpack fixmap", data[0])
	}
	if _, err := wire.Encode(bustest.SampleReply("run1", "c1"), "text/plain"); !errors.Is(err, wire.ErrUnsupportedContentType) {
		t.Errorf("text/plain: err = %v", err)
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	asJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	call := func(f func(*wire.CallRequest)) []byte { c := bustest.SampleCall("run1", "c1"); f(&c); return asJSON(c) }
	appr := func(f func(*wire.ApprovalRequest)) []byte {
		c := bustest.SampleApproval("run1", "c1")
		f(&c)
		return asJSON(c)
	}
	reply := func(f func(*wire.CallReply)) []byte { c := bustest.SampleReply("run1", "c1"); f(&c); return asJSON(c) }
	dec := func(f func(*wire.Decision)) []byte {
		c := bustest.SampleDecision("run1", "c1")
		f(&c)
		return asJSON(c)
	}
	ev := func(f func(*wire.Event)) []byte {
		e := wire.Event{ConversationID: "c", Type: "t"}
		f(&e)
		return asJSON(e)
	}
	tests := []struct {
		name  string
		into  func() any
		data  []byte
		field string // "" : a decode error
	}{
		{"call garbage", func() any { return new(wire.CallRequest) }, []byte(`{"run_id":`), ""},
		{"call trailing", func() any { return new(wire.CallRequest) }, append(call(func(*wire.CallRequest) {}), []byte(` {}`)...), ""},
		{"call no run", func() any { return new(wire.CallRequest) }, call(func(c *wire.CallRequest) { c.RunID = "" }), "run_id"},
		{"call dotted run", func() any { return new(wire.CallRequest) }, call(func(c *wire.CallRequest) { c.RunID = "a.b" }), "run_id"},
		{"call no conversation", func() any { return new(wire.CallRequest) }, call(func(c *wire.CallRequest) { c.ConversationID = "" }), "conversation_id"},
		{"call no call id", func() any { return new(wire.CallRequest) }, call(func(c *wire.CallRequest) { c.ToolCallID = "" }), "tool_call_id"},
		{"call wildcard tool", func() any { return new(wire.CallRequest) }, call(func(c *wire.CallRequest) { c.ToolName = "a*" }), "tool_name"},
		{"call spaced tool", func() any { return new(wire.CallRequest) }, call(func(c *wire.CallRequest) { c.ToolName = "a b" }), "tool_name"},
		{"call array args", func() any { return new(wire.CallRequest) }, call(func(c *wire.CallRequest) { c.Args = json.RawMessage(`[1]`) }), "args"},
		{"call no args", func() any { return new(wire.CallRequest) }, call(func(c *wire.CallRequest) { c.Args = nil }), "args"},
		{"call string metadata", func() any { return new(wire.CallRequest) }, call(func(c *wire.CallRequest) { c.Metadata = json.RawMessage(`"x"`) }), "metadata"},
		{"call negative attempt", func() any { return new(wire.CallRequest) }, call(func(c *wire.CallRequest) { c.Attempt = -1 }), "attempt"},
		{"approval wrong digest", func() any { return new(wire.ApprovalRequest) }, appr(func(c *wire.ApprovalRequest) { c.Args = json.RawMessage(`{"path":"/etc"}`) }), "args_digest"},
		{"approval bad digest", func() any { return new(wire.ApprovalRequest) }, appr(func(c *wire.ApprovalRequest) { c.ArgsDigest = "zz" }), "args_digest"},
		{"approval bad parameters", func() any { return new(wire.ApprovalRequest) }, appr(func(c *wire.ApprovalRequest) { c.Parameters = json.RawMessage(`true`) }), "parameters"},
		{"reply unknown outcome", func() any { return new(wire.CallReply) }, reply(func(c *wire.CallReply) { c.Outcome = "maybe" }), "outcome"},
		{"reply no outcome", func() any { return new(wire.CallReply) }, reply(func(c *wire.CallReply) { c.Outcome = "" }), "outcome"},
		{"reply retry without message", func() any { return new(wire.CallReply) }, reply(func(c *wire.CallReply) { c.Outcome, c.Message = wire.OutcomeRetry, "" }), "message"},
		{"reply bad value", func() any { return new(wire.CallReply) }, []byte(`{"run_id":"r","tool_call_id":"c","outcome":"return","value":"\u0000`), ""},
		{"decision no approver", func() any { return new(wire.Decision) }, dec(func(d *wire.Decision) { d.ApproverID = "" }), "approver_id"},
		{"decision override on denial", func() any { return new(wire.Decision) }, dec(func(d *wire.Decision) { d.Approved = false }), "override_args"},
		{"decision short signature", func() any { return new(wire.Decision) }, dec(func(d *wire.Decision) { d.Signature = []byte{1, 2} }), "signature"},
		{"decision no time", func() any { return new(wire.Decision) }, dec(func(d *wire.Decision) { d.DecidedAt = time.Time{} }), "decided_at"},
		{"event no type", func() any { return new(wire.Event) }, ev(func(e *wire.Event) { e.Type = "" }), "type"},
		{"event no conversation", func() any { return new(wire.Event) }, ev(func(e *wire.Event) { e.ConversationID = "" }), "conversation_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := wire.Decode(tt.data, wire.ContentTypeJSON, tt.into())
			var ve *wire.ValidationError
			var de *wire.DecodeError
			switch {
			case tt.field == "" && !errors.As(err, &de):
				t.Errorf("err = %v, want a DecodeError", err)
			case tt.field != "" && (!errors.As(err, &ve) || ve.Field != tt.field):
				t.Errorf("err = %v, want a ValidationError on %s", err, tt.field)
			}
		})
	}
}

func TestEncodeRefusesInvalid(t *testing.T) {
	t.Parallel()
	c := bustest.SampleCall("run1", "c1")
	c.Args = json.RawMessage(`"no"`)
	if _, err := wire.Encode(c, ""); err == nil || !strings.Contains(err.Error(), "args") {
		t.Errorf("err = %v", err)
	}
}

// AppendEncode writes after what dst holds json.Marshal's bytes, or
// msgpack that decodes to the same message, from encoders it uses again;
// and refuses what Encode refuses.
func TestAppendEncode(t *testing.T) {
	t.Parallel()
	c := bustest.SampleCall("run1", "c1")
	c.Args = json.RawMessage(`{"q": "<a & b>", "n": [1, 2]}`)
	wantJSON, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		dst := make([]byte, 3, 8)
		copy(dst, "abc")
		got, err := wire.AppendEncode(dst, c, wire.ContentTypeJSON)
		if err != nil {
			t.Fatal(err)
		}
		if string(got[:3]) != "abc" || !bytes.Equal(got[3:], wantJSON) {
			t.Errorf("json: %q, want abc + %q", got, wantJSON)
		}
		got, err = wire.AppendEncode(dst, c, wire.ContentTypeMsgpack)
		if err != nil {
			t.Fatal(err)
		}
		var back wire.CallRequest
		if err := wire.Decode(got[3:], wire.ContentTypeMsgpack, &back); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c, back); string(got[:3]) != "abc" || diff != "" {
			t.Errorf("msgpack: prefix %q, message (-sent +decoded):\n%s", got[:3], diff)
		}
	}
	bad := c
	bad.Args = json.RawMessage(`"no"`)
	if _, err := wire.AppendEncode(nil, bad, ""); err == nil || !strings.Contains(err.Error(), "args") {
		t.Errorf("err = %v", err)
	}
	if _, err := wire.AppendEncode(nil, func() {}, wire.ContentTypeJSON); err == nil {
		t.Error("a value JSON cannot hold was encoded")
	}
}

func TestDigestArgsIsCanonical(t *testing.T) {
	t.Parallel()
	a, err := wire.DigestArgs(json.RawMessage(`{"b": 1, "a": {"y": [1, 2.50], "x": "<&>"}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := wire.DigestArgs(json.RawMessage(`{"a":{"x":"<&>","y":[1,2.50]},"b":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if a != b || len(a) != 64 {
		t.Errorf("digests differ: %s %s", a, b)
	}
	c, err := wire.DigestArgs(json.RawMessage(`{"a":{"x":"<&>","y":[1,2.5]},"b":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Error("number literals 2.50 and 2.5 digest alike; the canonical form keeps literals")
	}
	got, err := wire.CanonicalJSON([]byte(` {"b":1, "a":"<&>"} `))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"a":"<&>","b":1}` {
		t.Errorf("canonical = %s", got)
	}
	if _, err := wire.DigestArgs(json.RawMessage(`{"a":1} x`)); err == nil {
		t.Error("trailing data accepted")
	}
}

func TestDecisionSignature(t *testing.T) {
	t.Parallel()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := bustest.SampleDecision("run1", "c1")
	if err := d.Sign(priv); err != nil {
		t.Fatal(err)
	}
	if err := d.Verify(pub); err != nil {
		t.Fatalf("verify: %v", err)
	}
	// The signature survives both encodings (decided_at comes back in
	// another location from msgpack).
	for _, ct := range []string{wire.ContentTypeMsgpack, wire.ContentTypeJSON} {
		got := roundTrip(t, d, ct).(*wire.Decision)
		if err := got.Verify(pub); err != nil {
			t.Errorf("verify after %s: %v", ct, err)
		}
	}
	tampered := []func(*wire.Decision){
		func(d *wire.Decision) { d.Approved = false; d.OverrideArgs = nil },
		func(d *wire.Decision) { d.OverrideArgs = json.RawMessage(`{"path":"/"}`) },
		func(d *wire.Decision) { d.ToolCallID = "c2" },
		func(d *wire.Decision) { d.DecidedAt = d.DecidedAt.Add(time.Second) },
		func(d *wire.Decision) { d.Signature = nil },
	}
	for i, f := range tampered {
		c := d
		f(&c)
		if err := c.Verify(pub); !errors.Is(err, wire.ErrBadSignature) {
			t.Errorf("tampering %d: err = %v, want ErrBadSignature", i, err)
		}
	}
	other, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Verify(other); !errors.Is(err, wire.ErrBadSignature) {
		t.Errorf("other key: err = %v", err)
	}
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	ok := func(s string, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for got, want := range map[string]string{
		ok(wire.CallSubject("weather")):      "toolgate.call.weather",
		ok(wire.ApprovalSubject("rm")):       "toolgate.approval.rm",
		ok(wire.CallReplySubject("r1")):      "toolgate.reply.r1.call",
		ok(wire.DecisionSubject("r1")):       "toolgate.reply.r1.approval",
		ok(wire.EventSubject("conv")):        "toolgate.event.conv",
		ok(wire.DLQSubject(wire.DLQDecode)):  "toolgate.dlq.decode",
		ok(wire.AuditSubject("r1")):          "toolgate.audit.r1",
		ok(wire.CallConsumerName("weather")): "call_weather",
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
	for _, bad := range []string{"", "a.b", "a*", ">", "a b", "a\tb", "a/b", "a\x00", strings.Repeat("x", 300)} {
		if _, err := wire.CallSubject(bad); err == nil {
			t.Errorf("CallSubject(%q) accepted", bad)
		}
	}
	run, kind, err := wire.ParseReplySubject("toolgate.reply.r1.approval")
	if err != nil || run != "r1" || kind != wire.ReplyKindApproval {
		t.Errorf("parse = %s %s %v", run, kind, err)
	}
	for _, bad := range []string{"toolgate.reply.r1", "toolgate.reply.r1.other", "toolgate.call.r1.call"} {
		if _, _, err := wire.ParseReplySubject(bad); err == nil {
			t.Errorf("ParseReplySubject(%q) accepted", bad)
		}
	}
}

// A msgpack body that declares more elements than it has bytes is refused
// before the decoder allocates them: four billion events in twelve bytes
// would otherwise take all memory.
func TestDecodeRefusesImpossibleLengths(t *testing.T) {
	t.Parallel()
	bodies := map[string][]byte{
		"array32":  append([]byte{0x81, 0xa6}, append([]byte("events"), 0xdd, 0x55, 0x25, 0x85, 0xaf)...),
		"map32":    {0xdf, 0x7f, 0xff, 0xff, 0xff, 0xc0},
		"str32":    {0xdb, 0x7f, 0xff, 0xff, 0xff, 'x'},
		"fixarray": {0x9f, 0xc0},
		"unused":   {0xc1},
	}
	for name, body := range bodies {
		var batch wire.EventBatch
		err := wire.Decode(body, wire.ContentTypeMsgpack, &batch)
		var de *wire.DecodeError
		if !errors.As(err, &de) || !strings.Contains(err.Error(), "malformed msgpack") {
			t.Errorf("%s: %v, want a malformed msgpack decode error", name, err)
		}
	}
}
