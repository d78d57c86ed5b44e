package deferred_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/deferred"
)

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"sorted keys", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"nested and whitespace", "{ \"z\" : [ {\"y\":1, \"x\":2} ], \"a\" : {\"d\":null,\"c\":true} }\n", `{"a":{"c":true,"d":null},"z":[{"x":2,"y":1}]}`},
		{"number literals kept", `{"a":1.0,"b":1e3,"c":-0,"d":12345678901234567890}`, `{"a":1.0,"b":1e3,"c":-0,"d":12345678901234567890}`},
		{"strings re-encoded", `{"s":"\u0041<&>\/"}`, `{"s":"A<&>/"}`},
		{"scalars", `"x"`, `"x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := deferred.CanonicalJSON([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
	for _, bad := range []string{``, `{`, `{"a":1,"a":2}`, `[{"a":1,"b":{"c":1,"c":1}}]`, `{} {}`, `1 2`} {
		if got, err := deferred.CanonicalJSON([]byte(bad)); err == nil {
			t.Errorf("CanonicalJSON(%q) = %s, want an error", bad, got)
		}
	}
}

func TestArgsDigest(t *testing.T) {
	t.Parallel()
	digest := func(s string) string {
		t.Helper()
		d, err := deferred.ArgsDigest(raw(s))
		if err != nil {
			t.Fatalf("ArgsDigest(%s): %v", s, err)
		}
		return d
	}
	base := digest(`{"path":".env","content":"","opts":{"force":true,"mode":420}}`)
	sum := sha256.Sum256([]byte(`{"content":"","opts":{"force":true,"mode":420},"path":".env"}`))
	if want := hex.EncodeToString(sum[:]); base != want {
		t.Errorf("digest %s, want sha256 of the canonical text %s", base, want)
	}
	for _, same := range []string{
		`{"opts":{"mode":420,"force":true},"content":"","path":".env"}`,
		"{\n  \"path\": \".env\",\n  \"content\": \"\",\n  \"opts\": { \"force\": true, \"mode\": 420 }\n}",
	} {
		if got := digest(same); got != base {
			t.Errorf("digest of %s changed: %s", same, got)
		}
	}
	for _, other := range []string{
		`{"path":".env","content":" ","opts":{"force":true,"mode":420}}`,
		`{"path":".env","content":"","opts":{"force":false,"mode":420}}`,
		`{"path":".env","content":"","opts":{"force":true,"mode":420.0}}`,
		`{"path":".env","content":"","opts":{"force":true,"mode":420},"x":null}`,
	} {
		if got := digest(other); got == base {
			t.Errorf("digest of %s equals the original's", other)
		}
	}
	empty := digest(`{}`)
	for _, e := range []string{``, `null`, ` null `} {
		if got := digest(e); got != empty {
			t.Errorf("digest of %q = %s, want the digest of {}", e, got)
		}
	}
	if _, err := deferred.ArgsDigest(raw(`{"a":1,"a":1}`)); err == nil {
		t.Error("duplicate keys: no error")
	}
}

// The vectors of schemas/canonical_json_vectors.json, which docs/protocol.md
// gives implementers in other languages, are what CanonicalJSON and
// ArgsDigest compute.
func TestCanonicalJSONVectors(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../schemas/canonical_json_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Vectors []struct {
			Name        string `json:"name"`
			Input       string `json:"input"`
			InputBase64 []byte `json:"input_base64"`
			Canonical   string `json:"canonical"`
			SHA256      string `json:"sha256"`
			Error       string `json:"error"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Vectors) < 10 {
		t.Fatalf("%d vectors", len(doc.Vectors))
	}
	for _, v := range doc.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			in := []byte(v.Input)
			if v.InputBase64 != nil {
				in = v.InputBase64
			}
			got, err := deferred.CanonicalJSON(in)
			if v.Error != "" {
				if err == nil || !strings.Contains(err.Error(), v.Error) {
					t.Errorf("CanonicalJSON(%q) = %q, %v; want an error with %q", in, got, err, v.Error)
				}
				return
			}
			if err != nil || string(got) != v.Canonical {
				t.Fatalf("CanonicalJSON(%q) = %q, %v; want %q", in, got, err, v.Canonical)
			}
			sum := sha256.Sum256(got)
			if hex.EncodeToString(sum[:]) != v.SHA256 {
				t.Errorf("sha256 of %q is %x, the vector says %s", got, sum, v.SHA256)
			}
			if got[0] == '{' {
				if d, err := deferred.ArgsDigest(in); err != nil || d != v.SHA256 {
					t.Errorf("ArgsDigest = %s, %v; want %s", d, err, v.SHA256)
				}
			}
		})
	}
}
