package wire_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/wire"
)

// Decisions as a bot in another language builds them: the msgpack form the
// schema states, and the schema's JSON forms inside msgpack. Both decode to
// the same decision, whose signature verifies.
func TestDecisionMsgpackForms(t *testing.T) {
	t.Parallel()
	key := ed25519.NewKeyFromSeed([]byte("toolgate-example-signing-key-001"))
	decided := time.Date(2026, 3, 1, 12, 0, 0, 500_000_000, time.UTC)
	want := wire.Decision{
		RunID: "run1", ToolCallID: "call_2", ArgsDigest: strings.Repeat("ab", 32), Approved: true,
		OverrideArgs: []byte(`{"path":"b.txt","n":1.0}`), Metadata: []byte(`{"ticket":"OPS-7"}`), ApproverID: "bot", DecidedAt: decided,
	}
	if err := want.Sign(key); err != nil {
		t.Fatal(err)
	}
	base := func() map[string]any {
		return map[string]any{
			"run_id": want.RunID, "tool_call_id": want.ToolCallID, "args_digest": want.ArgsDigest,
			"approved": true, "approver_id": want.ApproverID,
		}
	}
	body := func(t *testing.T, m map[string]any) []byte {
		t.Helper()
		b, err := msgpack.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ok := []struct {
		name string
		set  map[string]any
	}{
		{"msgpack form: timestamp, bin, bin", map[string]any{
			"decided_at": decided, "signature": want.Signature, "override_args": []byte(want.OverrideArgs),
			"metadata": []byte(want.Metadata)}},
		{"schema's forms: RFC 3339 string, base64, string", map[string]any{
			"decided_at": "2026-03-01T13:00:00.5+01:00", "signature": base64.StdEncoding.EncodeToString(want.Signature),
			"override_args": string(want.OverrideArgs), "metadata": string(want.Metadata)}},
		{"mixed", map[string]any{
			"decided_at": "2026-03-01T12:00:00.5Z", "signature": want.Signature, "override_args": string(want.OverrideArgs),
			"metadata": []byte(want.Metadata)}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			m := base()
			for k, v := range tc.set {
				m[k] = v
			}
			var got wire.Decision
			if err := wire.Decode(body(t, m), wire.ContentTypeMsgpack, &got); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !got.DecidedAt.Equal(decided) || string(got.OverrideArgs) != string(want.OverrideArgs) || string(got.Signature) != string(want.Signature) ||
				string(got.Metadata) != string(want.Metadata) {
				t.Errorf("decoded %+v, want %+v", got, want)
			}
			if err := got.Verify(key.Public().(ed25519.PublicKey)); err != nil {
				t.Errorf("signature: %v", err)
			}
		})
	}
	bad := []struct {
		name, field string
		v           any
		why         string
	}{
		{"override_args as a map", "override_args", map[string]any{"path": "b.txt"}, "override_args"},
		{"metadata as a map", "metadata", map[string]any{"ticket": "OPS-7"}, "metadata"},
		{"decided_at not RFC 3339", "decided_at", "1 March 2026", "decided_at"},
		{"decided_at a number", "decided_at", 1772366400, "decided_at"},
		{"signature not base64", "signature", "not base64!", "signature"},
		{"signature a number", "signature", 7, "signature"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			m := base()
			m["decided_at"], m["signature"] = decided, want.Signature
			m[tc.field] = tc.v
			var got wire.Decision
			err := wire.Decode(body(t, m), wire.ContentTypeMsgpack, &got)
			var de *wire.DecodeError
			if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.why) {
				t.Errorf("error %v, want a decode error naming %s", err, tc.why)
			}
		})
	}
	// A base64 signature of the wrong length decodes, and validation names it.
	m := base()
	m["decided_at"], m["signature"] = decided, base64.StdEncoding.EncodeToString(want.Signature[:32])
	var got wire.Decision
	if err := wire.Decode(body(t, m), wire.ContentTypeMsgpack, &got); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Errorf("32-byte signature: %v, want an error naming signature", err)
	}
}
