package wire_test

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// A call request travels as msgpack on its tool's subject, with an id that
// makes a second publish of the same attempt a duplicate.
func Example() {
	req := wire.CallRequest{
		RunID: "r1", ConversationID: "c1", ToolCallID: "call_1", ToolName: "get_weather",
		Args: json.RawMessage(`{"city":"Paris"}`), Deadline: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Attempt: 1,
	}
	subject, _ := wire.CallSubject(req.ToolName)
	body, _ := wire.Encode(req, wire.ContentTypeMsgpack)

	var got wire.CallRequest
	if err := wire.Decode(body, wire.ContentTypeMsgpack, &got); err != nil {
		fmt.Println(err)
	}
	fmt.Println(subject, req.MsgID(), string(got.Args))
	// Output: toolgate.call.get_weather r1/call_1/call.1 {"city":"Paris"}
}

// A sender that publishes many messages encodes each into a buffer it
// reuses once the message is sent.
func ExampleAppendEncode() {
	var buf []byte
	for _, city := range []string{"Paris", "Oslo"} {
		reply := wire.CallReply{RunID: "r1", ToolCallID: "call_" + city, Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"sunny"`)}
		var err error
		if buf, err = wire.AppendEncode(buf[:0], reply, wire.ContentTypeJSON); err != nil {
			fmt.Println(err)
		}
		fmt.Println(string(buf))
	}
	// Output:
	// {"run_id":"r1","tool_call_id":"call_Paris","outcome":"return","value":"sunny"}
	// {"run_id":"r1","tool_call_id":"call_Oslo","outcome":"return","value":"sunny"}
}

// Decode names the field that is wrong.
func ExampleDecode() {
	var r wire.CallReply
	err := wire.Decode([]byte(`{"run_id":"r1","tool_call_id":"call_1","outcome":"retry"}`), wire.ContentTypeJSON, &r)
	fmt.Println(err)
	// Output: call reply: message: is empty for outcome "retry"
}

// An approver signs its decision; the orchestrator verifies it with the
// approver's public key. Changing the decision breaks the signature.
func ExampleDecision_Sign() {
	seed := make([]byte, ed25519.SeedSize)
	key := ed25519.NewKeyFromSeed(seed)
	digest, _ := wire.DigestArgs(json.RawMessage(`{"path": "/tmp/x"}`))
	d := wire.Decision{
		RunID: "r1", ToolCallID: "call_1", ArgsDigest: digest, Approved: true,
		ApproverID: "alice", DecidedAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	if err := d.Sign(key); err != nil {
		fmt.Println(err)
	}
	fmt.Println(d.Verify(key.Public().(ed25519.PublicKey)))
	d.Approved = false
	fmt.Println(d.Verify(key.Public().(ed25519.PublicKey)))
	// Output:
	// <nil>
	// decision signature does not verify
}

// The orchestrator's events carry typed data.
func ExampleReplyApplied() {
	ev := wire.Event{ConversationID: "c1", RunID: "r1", Type: wire.EventReplyApplied, ToolCallID: "call_1",
		Data: json.RawMessage(`{"kind":"approval","approved":false,"approver_id":"alice","message":"not today"}`)}
	var d wire.ReplyApplied
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		fmt.Println(err)
	}
	fmt.Println(d.Kind, *d.Approved, d.ApproverID, d.Message)
	// Output: approval false alice not today
}
