// Package msgpackmap writes msgpack maps entry by entry, for the few types
// whose EncodeMsgpack replaces reflection on a hot path: reflection boxes
// each omitempty field's value to test it for emptiness and lists the
// fields it keeps, garbage on every message, where a method writes the same
// bytes without any. Each such method is held to reflection's bytes by
// msgpackmaptest.
package msgpackmap

import (
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Writer writes a map's entries to Enc, keeping the first error (Err):
// after one, it writes nothing more.
type Writer struct {
	Enc *msgpack.Encoder
	Err error
}

// Count is how many of present are true: the entries of a map whose
// optional ones are written only when set.
func Count(present ...bool) int {
	n := 0
	for _, p := range present {
		if p {
			n++
		}
	}
	return n
}

// Len starts a map of n entries.
func (w *Writer) Len(n int) {
	if w.Err == nil {
		w.Err = w.Enc.EncodeMapLen(n)
	}
}

// Key writes k and reports whether its value is to follow.
func (w *Writer) Key(k string) bool {
	if w.Err == nil {
		w.Err = w.Enc.EncodeString(k)
	}
	return w.Err == nil
}

// Str writes the entry k: v.
func (w *Writer) Str(k, v string) {
	if w.Key(k) {
		w.Err = w.Enc.EncodeString(v)
	}
}

// Bin writes the entry k: v as bin, as reflection writes a []byte (and a
// json.RawMessage).
func (w *Writer) Bin(k string, v []byte) {
	if w.Key(k) {
		w.Err = w.Enc.EncodeBytes(v)
	}
}

// Int writes the entry k: v as reflection writes an int.
func (w *Writer) Int(k string, v int64) {
	if w.Key(k) {
		w.Err = w.Enc.EncodeInt(v)
	}
}

// Time writes the entry k: v.
func (w *Writer) Time(k string, v time.Time) {
	if w.Key(k) {
		w.Err = w.Enc.EncodeTime(v)
	}
}

// Value writes the entry k: v by reflection (v a pointer, slice or map,
// which cost nothing to box).
func (w *Writer) Value(k string, v any) {
	if w.Key(k) {
		w.Err = w.Enc.Encode(v)
	}
}
