package orchestrator

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
)

// A stored batch gives back the Requests it was made from byte for byte
// (D12, D34), though it keeps each call's args once: tool metadata standing
// in for a call's missing one, args written differently from the inline
// record the batch took over, metadata of ids that are no call, and
// override args deferred again (D24, D26).
func TestBatchKeepsRequestsExactly(t *testing.T) {
	ag := &agentRuntime{cfg: &AgentConfig{Tools: []ToolConfig{
		{Name: "delete_file", ApprovalMetadata: json.RawMessage(`{"reason":"destructive"}`)},
	}}}
	pub := &publisher{publisherParams: publisherParams{clock: time.Now, discovery: &discovery{}}}
	req := deferred.Requests{
		Approvals: []deferred.Call{
			{ToolName: "delete_file", ToolCallID: "a1", Args: json.RawMessage(`{"path":"x"}`)},
			{ToolName: "delete_file", ToolCallID: "a2", Args: json.RawMessage(`{"path":"y"}`)},
		},
		Calls: []deferred.Call{
			{ToolName: "compute", ToolCallID: "c1", Args: json.RawMessage(`{"n": 1, "m": 2}`)},
			{ToolName: "compute", ToolCallID: "c2", Args: json.RawMessage(`{"override":true}`)},
		},
		Metadata: map[string]json.RawMessage{
			"a2":    json.RawMessage(`{"asked_by":"model"}`),
			"c2":    json.RawMessage(`{"job":7}`),
			"other": json.RawMessage(`[1]`),
		},
	}
	// c1 was published during the run's inline wait, its args written
	// another way.
	prev := &Batch{RunID: "r1", Calls: []*PendingCall{{
		ToolCallID: "c1", ToolName: "compute", Kind: deferred.KindCall,
		Args: json.RawMessage(`{"m":2,"n":1}`), Published: true, PublishedAt: time.Now(),
	}}}
	b, err := pub.newBatch(ag, "r1", &req, prev, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b.Calls[2] != prev.Calls[0] {
		t.Fatal("the inline call's record was not taken over")
	}
	if got := string(b.Calls[0].Metadata); got != `{"reason":"destructive"}` {
		t.Errorf("a1 goes out with metadata %s, want the tool's", got)
	}
	raw, err := msgpack.Marshal(&Conversation{ID: "c", Batch: b})
	if err != nil {
		t.Fatal(err)
	}
	var back Conversation
	if err := msgpack.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(req, back.Batch.requests()); diff != "" {
		t.Errorf("requests after a store round trip (-want +got):\n%s", diff)
	}

	// Without any metadata, none comes back.
	plain := deferred.Requests{Calls: []deferred.Call{{ToolName: "compute", ToolCallID: "c1", Args: json.RawMessage(`{}`)}}}
	b, err = pub.newBatch(ag, "r2", &plain, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(plain, b.requests()); diff != "" {
		t.Errorf("plain requests (-want +got):\n%s", diff)
	}
}

// The pooled encoders give the bytes a fresh encoder gives, one encoding
// after another, whatever came before (a large value, a failure).
func TestPooledEncodersEncodeAsFreshOnes(t *testing.T) {
	values := []any{
		map[string]string{"b": "2", "a": "1", "c": "3"},
		&Conversation{ID: "c1", Status: StatusPaused, History: []agent.Message{{Kind: agent.KindRequest}}},
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
	rec := &record{Head: &Conversation{ID: "c1", Status: StatusRunning}}
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
	c := &Conversation{History: make([]agent.Message, 70, 100), historyRoom: new(atomic.Bool)}
	a, b := c.clone(), c.clone()
	if cap(a.History) != 100 || cap(b.History) != 100 {
		t.Fatalf("clones' history cap %d and %d; want the room shared (100)", cap(a.History), cap(b.History))
	}
	if !a.historyRoom.CompareAndSwap(false, true) || b.historyRoom.CompareAndSwap(false, true) {
		t.Error("the room went to no run, or to two")
	}
	folded := c.clone()
	if err := folded.apply(&record{History: &historyChange{At: 70, Messages: []agent.Message{{Kind: agent.KindRequest}}}}); err != nil {
		t.Fatal(err)
	}
	if folded.historyRoom != nil || cap(folded.clone().History) != len(folded.History) {
		t.Error("a history a record appended to kept a room flag")
	}
}
