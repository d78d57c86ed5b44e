package deferred_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/vmihailenco/msgpack/v5"
)

// jsonEqual compares raw JSON texts by meaning as far as a round trip through
// encoding/json may change them: whitespace and HTML escaping, and a missing
// value against null. Number literals must stay identical.
var jsonEqual = cmp.Comparer(func(a, b json.RawMessage) bool {
	return bytes.Equal(normJSON(a), normJSON(b))
})

func normJSON(raw json.RawMessage) []byte {
	if len(bytes.TrimSpace(raw)) == 0 {
		return []byte("null")
	}
	var c, e bytes.Buffer
	if err := json.Compact(&c, raw); err != nil {
		return raw
	}
	json.HTMLEscape(&e, c.Bytes())
	return e.Bytes()
}

// cmpOpts also treats nil and empty maps and lists alike, which encoding
// distinguishes no more than Go code reading them does.
var cmpOpts = cmp.Options{jsonEqual, cmp.FilterPath(func(p cmp.Path) bool {
	return p.Last().Type() != reflect.TypeFor[json.RawMessage]()
}, cmpopts.EquateEmpty())}

func roundTripJSON[T any](t testing.TB, in T) (T, []byte) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return out, b
}

func roundTripMsgpack[T any](t testing.TB, in T) (T, []byte) {
	t.Helper()
	b, err := msgpack.Marshal(in)
	if err != nil {
		t.Fatalf("msgpack marshal: %v", err)
	}
	var out T
	if err := msgpack.Unmarshal(b, &out); err != nil {
		t.Fatalf("msgpack unmarshal: %v", err)
	}
	return out, b
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }
