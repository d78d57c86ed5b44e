package conversation

import (
	"bytes"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/agent"
)

// The pooled encoders give the bytes a fresh encoder gives, one encoding
// after another, whatever came before (a large value, a failure).
func TestPooledEncodersEncodeAsFreshOnes(t *testing.T) {
	values := []any{
		map[string]string{"b": "2", "a": "1", "c": "3"},
		&State{ID: "c1", Status: StatusPaused, History: []agent.Message{{Kind: agent.KindRequest}}},
		strings.Repeat("x", 2<<20),
		make(chan int), // does not encode
		map[string]string{"z": "1", "y": "2"},
	}
	for _, sorted := range []bool{true, false} {
		pool := newEncoderPool(sorted)
		for i, v := range values {
			var buf bytes.Buffer
			enc := msgpack.NewEncoder(&buf)
			enc.SetSortMapKeys(sorted)
			werr := enc.Encode(v)
			got, err := pool.encode(v)
			if _, isMap := v.(map[string]string); isMap && !sorted {
				// Unsorted, a map's keys come in any order.
				continue
			}
			if (err != nil) != (werr != nil) {
				t.Fatalf("sorted %v, value %d: error %v, want %v", sorted, i, err, werr)
			}
			if err == nil && !bytes.Equal(got, buf.Bytes()) {
				t.Errorf("sorted %v, value %d: encoded differently from a fresh encoder", sorted, i)
			}
		}
	}
	rec := &Record{Head: &State{ID: "c1", Status: StatusRunning}}
	want, err := msgpack.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := recordEncoders.encode(rec); !bytes.Equal(got, want) {
		t.Error("a record encodes differently from msgpack.Marshal")
	}
}

// The room past a history's length is shared by the clones of a state
// with the flag that gives it to one run; a history folded from records
// has none.
func TestHistoryRoomGoesToOneRun(t *testing.T) {
	c := &State{History: make([]agent.Message, 70, 100), historyRoom: new(atomic.Bool)}
	a, b := c.Clone(), c.Clone()
	if cap(a.History) != 100 || cap(b.History) != 100 {
		t.Fatalf("clones' history cap %d and %d; want the room shared (100)", cap(a.History), cap(b.History))
	}
	if !a.historyRoom.CompareAndSwap(false, true) || b.historyRoom.CompareAndSwap(false, true) {
		t.Error("the room went to no run, or to two")
	}
	folded := c.Clone()
	if err := folded.Fold(&Record{History: &HistoryChange{At: 70, Messages: []agent.Message{{Kind: agent.KindRequest}}}}); err != nil {
		t.Fatal(err)
	}
	if folded.historyRoom != nil || cap(folded.Clone().History) != len(folded.History) {
		t.Error("a history a record appended to kept a room flag")
	}
}
