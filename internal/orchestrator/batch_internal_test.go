package orchestrator

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/conversation"
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
	prev := &conversation.Batch{RunID: "r1", Calls: []*conversation.PendingCall{{
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
	raw, err := msgpack.Marshal(&conversation.State{ID: "c", Batch: b})
	if err != nil {
		t.Fatal(err)
	}
	var back conversation.State
	if err := msgpack.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(req, back.Batch.Requests()); diff != "" {
		t.Errorf("requests after a store round trip (-want +got):\n%s", diff)
	}

	// Without any metadata, none comes back.
	plain := deferred.Requests{Calls: []deferred.Call{{ToolName: "compute", ToolCallID: "c1", Args: json.RawMessage(`{}`)}}}
	b, err = pub.newBatch(ag, "r2", &plain, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(plain, b.Requests()); diff != "" {
		t.Errorf("plain requests (-want +got):\n%s", diff)
	}
}
