// Package msgpackmaptest holds a type's own EncodeMsgpack to the bytes
// msgpack's reflection writes for it.
package msgpackmaptest

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// Encode is v's msgpack encoding, with map keys sorted and compact ints as
// asked (the orchestrator's fingerprints sort; the wire's codec is
// compact).
func Encode(t testing.TB, v any, sorted, compactInts bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(sorted)
	enc.UseCompactInts(compactInts)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Same fails unless own and reflected, a value and the same value as a
// type without its EncodeMsgpack, encode to the same bytes in every
// encoder setting.
func Same(t testing.TB, own, reflected any) {
	t.Helper()
	for _, sorted := range []bool{false, true} {
		for _, compact := range []bool{false, true} {
			got, want := Encode(t, own, sorted, compact), Encode(t, reflected, sorted, compact)
			if !bytes.Equal(got, want) {
				t.Fatalf("%+v (sorted keys %v, compact ints %v) encodes as\n%x\nreflection gives\n%x", own, sorted, compact, got, want)
			}
		}
	}
}

// EveryField fails unless the msgpack map enc has an entry for each field
// of struct typ that msgpack stores: given a value with every field set, a
// field added to the type and not to its EncodeMsgpack fails here.
func EveryField(t testing.TB, typ reflect.Type, enc []byte) {
	t.Helper()
	var m map[string]msgpack.RawMessage
	if err := msgpack.Unmarshal(enc, &m); err != nil {
		t.Fatalf("%s: %v", typ.Name(), err)
	}
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if _, ok := m[name]; !ok {
			t.Errorf("%s.%s (%q), set, is not written by its EncodeMsgpack", typ.Name(), f.Name, name)
		}
	}
}
