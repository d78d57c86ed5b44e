package bustest

import (
	"encoding/json"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// SampleDeadline is the deadline of the samples: fixed, with nanoseconds,
// so that a codec that loses precision is seen.
var SampleDeadline = time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)

// SampleCall is a valid call request with args and metadata whose numbers
// are of several kinds, for codec and transport tests.
func SampleCall(run, call string) wire.CallRequest {
	return wire.CallRequest{
		RunID: run, ConversationID: "conv1", ToolCallID: call, ToolName: "weather",
		Args: json.RawMessage(`{"city":"Paris","days":3,"ratio":0.5}`), Metadata: json.RawMessage(`{"k":[1,2]}`),
		Deadline: SampleDeadline, Attempt: 1,
	}
}

// SampleApproval is a valid approval request (its digest matches).
func SampleApproval(run, call string) wire.ApprovalRequest {
	args := json.RawMessage(`{"path":"/tmp/x","force":true}`)
	d, err := wire.DigestArgs(args)
	if err != nil {
		panic(err)
	}
	return wire.ApprovalRequest{
		RunID: run, ConversationID: "conv1", ToolCallID: call, ToolName: "delete_file",
		ToolDescription: "deletes a file", Parameters: json.RawMessage(`{"type":"object"}`),
		Args: args, ArgsDigest: d, Metadata: json.RawMessage(`{"reason":"destructive"}`),
		Deadline: SampleDeadline, Attempt: 1,
	}
}

// SampleReply is a valid call reply with a value, content and metadata.
func SampleReply(run, call string) wire.CallReply {
	return wire.CallReply{
		RunID: run, ToolCallID: call, Outcome: wire.OutcomeReturn,
		Value: json.RawMessage(`{"temp":21.5,"n":7}`), Content: "extra", Metadata: json.RawMessage(`{"m":1}`), WorkerID: "w1",
	}
}

// SampleDecision is a valid, unsigned decision on SampleApproval with
// override args.
func SampleDecision(run, call string) wire.Decision {
	a := SampleApproval(run, call)
	return wire.Decision{
		RunID: run, ToolCallID: call, ArgsDigest: a.ArgsDigest, Approved: true,
		OverrideArgs: json.RawMessage(`{"path":"/tmp/y"}`), Message: "ok", ApproverID: "alice",
		DecidedAt: time.Date(2026, 5, 1, 12, 0, 0, 123, time.UTC),
	}
}
