package approver_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/wire"
)

func newKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func sampleDecision() wire.Decision {
	return wire.Decision{
		RunID:        "run-1",
		ToolCallID:   "call-1",
		ArgsDigest:   "3f0a1e6ad4f1e1c3c1d23f6e5c1f0f7d2b6f2d6c4c0b1f0e2a5d6c7b8a9f0e1d",
		Approved:     true,
		OverrideArgs: json.RawMessage(`{"path":"/tmp/x","n":1}`),
		ApproverID:   "bot",
		DecidedAt:    time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC),
	}
}

func TestSignVerify(t *testing.T) {
	t.Parallel()
	pub, priv := newKey(t)
	otherPub, _ := newKey(t)

	d := sampleDecision()
	if err := approver.Sign(priv, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Signature) != ed25519.SignatureSize {
		t.Fatalf("signature is %d bytes", len(d.Signature))
	}
	if err := approver.Verify(pub, d); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if err := approver.Verify(otherPub, d); !errors.Is(err, wire.ErrBadSignature) {
		t.Errorf("Verify with another key: %v, want ErrBadSignature", err)
	}
	unsigned := sampleDecision()
	if err := approver.Verify(pub, unsigned); !errors.Is(err, wire.ErrBadSignature) {
		t.Errorf("Verify unsigned: %v, want ErrBadSignature", err)
	}

	tampers := []struct {
		name string
		f    func(*wire.Decision)
	}{
		{"run_id", func(d *wire.Decision) { d.RunID = "run-2" }},
		{"tool_call_id", func(d *wire.Decision) { d.ToolCallID = "call-2" }},
		{"args_digest", func(d *wire.Decision) { d.ArgsDigest = "0" + d.ArgsDigest[1:] }},
		{"approved", func(d *wire.Decision) { d.Approved = false }},
		{"override_args value", func(d *wire.Decision) { d.OverrideArgs = json.RawMessage(`{"path":"/etc/passwd","n":1}`) }},
		{"override_args dropped", func(d *wire.Decision) { d.OverrideArgs = nil }},
		{"message", func(d *wire.Decision) { d.Message = "x" }},
		{"approver_id", func(d *wire.Decision) { d.ApproverID = "mallory" }},
		{"decided_at", func(d *wire.Decision) { d.DecidedAt = d.DecidedAt.Add(time.Nanosecond) }},
		{"signature", func(d *wire.Decision) { d.Signature = append([]byte{d.Signature[0] ^ 1}, d.Signature[1:]...) }},
	}
	for _, tt := range tampers {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := d
			c.Signature = append([]byte(nil), d.Signature...)
			tt.f(&c)
			if err := approver.Verify(pub, c); !errors.Is(err, wire.ErrBadSignature) {
				t.Errorf("Verify after changing %s: %v, want ErrBadSignature", tt.name, err)
			}
		})
	}

	// What does not change the meaning must not break the signature: key
	// order and spacing of override_args, the time zone of decided_at.
	same := d
	same.OverrideArgs = json.RawMessage(`{ "n": 1, "path": "/tmp/x" }`)
	same.DecidedAt = d.DecidedAt.In(time.FixedZone("X", 5*3600))
	if err := approver.Verify(pub, same); err != nil {
		t.Errorf("Verify of an equivalent decision: %v", err)
	}
}

func TestSignedDecisionSurvivesTheWire(t *testing.T) {
	t.Parallel()
	pub, priv := newKey(t)
	for _, ct := range []string{wire.ContentTypeMsgpack, wire.ContentTypeJSON} {
		t.Run(ct, func(t *testing.T) {
			t.Parallel()
			d := sampleDecision()
			d.DecidedAt = d.DecidedAt.In(time.Local)
			if err := approver.Sign(priv, &d); err != nil {
				t.Fatal(err)
			}
			data, err := wire.Encode(d, ct)
			if err != nil {
				t.Fatal(err)
			}
			var got wire.Decision
			if err := wire.Decode(data, ct, &got); err != nil {
				t.Fatal(err)
			}
			if err := approver.Verify(pub, got); err != nil {
				t.Errorf("Verify after a %s round trip: %v", ct, err)
			}
		})
	}
}

func TestSignRefusesBadKey(t *testing.T) {
	t.Parallel()
	d := sampleDecision()
	if err := approver.Sign(ed25519.PrivateKey{1, 2, 3}, &d); err == nil {
		t.Error("Sign with a 3-byte key succeeded")
	}
	if d.Signature != nil {
		t.Error("a failed Sign set a signature")
	}
}

func TestKeyFiles(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "approver.key")
	pub, err := approver.GenerateKey(file)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v, want 0600", st.Mode().Perm())
	}
	if _, err := approver.GenerateKey(file); !errors.Is(err, os.ErrExist) {
		t.Errorf("GenerateKey over an existing file: %v, want ErrExist", err)
	}
	priv, err := approver.LoadKey(file)
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(priv.Public()) {
		t.Fatal("loaded key does not match the generated public key")
	}
	parsedPub, err := approver.ParsePublicKey(approver.EncodePublicKey(pub))
	if err != nil {
		t.Fatal(err)
	}
	d := sampleDecision()
	if err := approver.Sign(priv, &d); err != nil {
		t.Fatal(err)
	}
	if err := approver.Verify(parsedPub, d); err != nil {
		t.Errorf("Verify with the printed public key: %v", err)
	}
}

func TestParsePrivateKey(t *testing.T) {
	t.Parallel()
	_, priv := newKey(t)
	corrupt := append(ed25519.PrivateKey(nil), priv...)
	corrupt[40] ^= 1
	tests := []struct {
		name    string
		data    string
		wantErr bool
	}{
		{"base64 seed", base64.StdEncoding.EncodeToString(priv.Seed()) + "\n", false},
		{"base64 private key", base64.StdEncoding.EncodeToString(priv), false},
		{"corrupt private key", base64.StdEncoding.EncodeToString(corrupt), true},
		{"wrong length", base64.StdEncoding.EncodeToString([]byte("short")), true},
		{"garbage", "not a key!", true},
		{"other PEM", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := approver.ParsePrivateKey([]byte(tt.data))
			if tt.wantErr {
				if err == nil {
					t.Error("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(priv) {
				t.Error("parsed key differs")
			}
		})
	}
	for _, s := range []string{"", "AAAA", "!!"} {
		if _, err := approver.ParsePublicKey(s); err == nil {
			t.Errorf("ParsePublicKey(%q) succeeded", s)
		}
	}
}
