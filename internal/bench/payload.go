package bench

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// The sample messages have the sizes of a typical file-editing call: ids
// as long as toolgate's and OpenAI's, arguments of a short file update.
const (
	sampleTool = "noop"
	sampleArgs = `{"path":"notes/todo.md","content":"- write the release notes\n- answer the review on the ` +
		`retry back-off\n- measure the deferred call round trip against raw JetStream\n"}`
	sampleMeta = `{"reason":"writes to the workspace"}`
)

// deadline is fixed so that encoded sizes do not vary between runs.
var sampleDeadline = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func runID(prefix string, n int64) string { return fmt.Sprintf("run_%s%022d", prefix, n) }

func toolCallID(run string, i int) string { return fmt.Sprintf("call_%s_%03d", run[4:], i) }

func sampleCallRequest(run, conversation, call string) wire.CallRequest {
	return wire.CallRequest{
		RunID:          run,
		ConversationID: conversation,
		ToolCallID:     call,
		ToolName:       sampleTool,
		Args:           json.RawMessage(sampleArgs),
		Metadata:       json.RawMessage(sampleMeta),
		Deadline:       sampleDeadline,
		Attempt:        1,
	}
}

func sampleApprovalRequest() wire.ApprovalRequest {
	args := json.RawMessage(sampleArgs)
	digest, err := wire.DigestArgs(args)
	if err != nil {
		panic(err) // sampleArgs is a constant JSON object
	}
	return wire.ApprovalRequest{
		RunID:           runID("a", 1),
		ConversationID:  "conv_" + runID("a", 1)[4:],
		ToolCallID:      toolCallID(runID("a", 1), 0),
		ToolName:        "update_file",
		ToolDescription: "Write a file in the workspace, replacing its content.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},` +
			`"content":{"type":"string"}},"required":["path","content"],"additionalProperties":false}`),
		Args:       args,
		ArgsDigest: digest,
		Metadata:   json.RawMessage(sampleMeta),
		Deadline:   sampleDeadline,
		Attempt:    1,
	}
}

// replyFor is what the built-in noop tool answers: the arguments back.
func replyFor(req wire.CallRequest, worker string) wire.CallReply {
	return wire.CallReply{
		RunID:      req.RunID,
		ToolCallID: req.ToolCallID,
		Outcome:    wire.OutcomeReturn,
		Value:      req.Args,
		WorkerID:   worker,
	}
}

func sampleDecision() wire.Decision {
	a := sampleApprovalRequest()
	return wire.Decision{
		RunID:      a.RunID,
		ToolCallID: a.ToolCallID,
		ArgsDigest: a.ArgsDigest,
		Approved:   true,
		Message:    "ok",
		ApproverID: "approver-policy-1",
		DecidedAt:  sampleDeadline.Add(-time.Hour),
		Signature:  make([]byte, 64), // an ed25519 signature's size
	}
}

func sampleEvent() wire.Event {
	return wire.Event{
		ConversationID: "conv_" + runID("a", 1)[4:],
		RunID:          runID("a", 1),
		Type:           "tool_call_deferred",
		ToolCallID:     toolCallID(runID("a", 1), 0),
		Data:           json.RawMessage(`{"tool_name":"update_file","kind":"call","args":` + sampleArgs + `}`),
		Time:           sampleDeadline.Add(-time.Hour),
	}
}
