package msgpackmap_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/msgpackmap"
)

// failAfter accepts n bytes, then fails every write.
type failAfter struct {
	n   int
	buf bytes.Buffer
}

var errFull = errors.New("full")

func (w *failAfter) Write(p []byte) (int, error) {
	if w.buf.Len()+len(p) > w.n {
		return 0, errFull
	}
	return w.buf.Write(p)
}

// The entries a Writer writes decode as the map they describe; the first
// error is kept and nothing is written after it.
func TestWriter(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 10, 0, 0, 5, time.UTC)
	write := func(w *msgpackmap.Writer) {
		w.Len(5)
		w.Str("s", "x")
		w.Bin("b", []byte("{}"))
		w.Int("i", -3)
		w.Time("t", at)
		w.Value("v", []int{1, 2})
	}
	var buf bytes.Buffer
	w := msgpackmap.Writer{Enc: msgpack.NewEncoder(&buf)}
	write(&w)
	if w.Err != nil {
		t.Fatal(w.Err)
	}
	var got struct {
		S string    `msgpack:"s"`
		B []byte    `msgpack:"b"`
		I int       `msgpack:"i"`
		T time.Time `msgpack:"t"`
		V []int     `msgpack:"v"`
	}
	if err := msgpack.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got.S != "x" || string(got.B) != "{}" || got.I != -3 || !got.T.Equal(at) || len(got.V) != 2 {
		t.Errorf("decoded %+v", got)
	}

	full := &failAfter{n: 6}
	w = msgpackmap.Writer{Enc: msgpack.NewEncoder(full)}
	write(&w)
	if !errors.Is(w.Err, errFull) {
		t.Errorf("error %v, want the first write's", w.Err)
	}
	if full.buf.Len() > 6 {
		t.Errorf("%d bytes written past the error", full.buf.Len())
	}
	if w.Key("k") {
		t.Error("Key after an error reports its value is to follow")
	}
}
