package aisdk

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
)

// FuzzRead holds arbitrary histories against a conversation that waits for
// an approval and a frontend call: whatever the client sends, an answer
// read is one to a call that waits for it, and a prompt read is the one
// new user message after the conversation's own.
func FuzzRead(f *testing.F) {
	args := json.RawMessage(`{"path":"b.txt"}`)
	digest, err := deferred.ArgsDigest(args)
	if err != nil {
		f.Fatal(err)
	}
	t := newTranscript()
	t.prompts = []string{"delete b.txt"}
	t.texts = []string{"on it"}
	t.calls["del"] = call{name: "delete_file", args: args}
	t.calls["time"] = call{name: "local_time", args: json.RawMessage(`{}`)}
	t.calls["old"] = call{name: "update_file", args: json.RawMessage(`{}`)}
	t.results["old"] = agent.Part{Kind: agent.PartToolReturn, ToolCallID: "old", Value: json.RawMessage(`"ok"`), Outcome: agent.OutcomeSuccess}
	w := waiting{
		approvals: map[string]*conversation.PendingCall{"del": {ToolCallID: "del", ToolName: "delete_file", Args: args, ArgsDigest: digest, Deadline: time.Now().Add(time.Hour)}},
		frontend:  map[string]*conversation.PendingCall{"time": {ToolCallID: "time", ToolName: "local_time"}},
	}
	user := `{"id":"u","role":"user","parts":[{"type":"text","text":"delete b.txt"}]}`
	f.Add(`[` + user + `,{"id":"a","role":"assistant","parts":[{"type":"step-start"},{"type":"text","text":"on it"},` +
		`{"type":"tool-delete_file","toolCallId":"del","state":"approval-responded","input":{"path":"b.txt"},"approval":{"id":"del:` + digest + `","approved":true}},` +
		`{"type":"tool-local_time","toolCallId":"time","state":"output-available","input":{},"output":"12:00"},` +
		`{"type":"tool-update_file","toolCallId":"old","state":"output-available","input":{},"output":"ok"}]}]`)
	f.Add(`[` + user + `,{"id":"u2","role":"user","parts":[{"type":"text","text":"more"}]}]`)
	f.Add(`[{"id":"a","role":"assistant","parts":[{"type":"tool-update_file","toolCallId":"nope","state":"approval-responded","input":{},"approval":{"id":"nope:00","approved":true}}]}]`)
	f.Fuzz(func(tt *testing.T, raw string) {
		var msgs []UIMessage
		if json.Unmarshal([]byte(raw), &msgs) != nil {
			return
		}
		r, err := read(msgs, t, w)
		if err != nil {
			return
		}
		for id, p := range r.decisions {
			pc := w.approvals[id]
			if pc == nil || p.Approval == nil || p.Approval.Approved == nil || p.Approval.ID != approvalID(id, pc.ArgsDigest) {
				tt.Fatalf("decision read for %s: %+v", id, p)
			}
		}
		for id, p := range r.results {
			if w.frontend[id] == nil || (p.State != stateOutputAvailable && p.State != stateOutputError) {
				tt.Fatalf("result read for %s: %+v", id, p)
			}
		}
		if r.prompt != "" && (msgs[len(msgs)-1].Role != "user" || r.prompt == "") {
			tt.Fatalf("prompt %q read from %s", r.prompt, raw)
		}
	})
}
