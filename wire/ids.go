package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/toolgate/toolgate/internal/deferred"
)

// Header names. Every message carries Content-Type (ContentTypeMsgpack
// when absent) and, where it has one, a Nats-Msg-Id that the stream uses
// to store a message published twice only once.
const (
	HeaderMsgID        = "Nats-Msg-Id"
	HeaderRun          = "Toolgate-Run"
	HeaderConversation = "Toolgate-Conversation"
	HeaderCall         = "Toolgate-Call"
	HeaderContentType  = "Content-Type"
	HeaderTraceParent  = "traceparent"
	// HeaderEventBatch marks a message of TOOLGATE_EVENTS that holds an
	// EventBatch; its value is the number of events.
	HeaderEventBatch = "Toolgate-Event-Batch"

	// Set on dead letters.
	HeaderDLQReason   = "Toolgate-DLQ-Reason"
	HeaderDLQSubject  = "Toolgate-DLQ-Subject" // the original subject
	HeaderDLQStream   = "Toolgate-DLQ-Stream"
	HeaderDLQSeq      = "Toolgate-DLQ-Seq" // the original stream sequence
	HeaderDLQConsumer = "Toolgate-DLQ-Consumer"
	// HeaderDLQTruncated holds the original body's size when the copy
	// keeps only its beginning (it would not fit the max payload).
	HeaderDLQTruncated = "Toolgate-DLQ-Truncated"
)

// Message kinds for MsgID: a request is of its deferred call's kind.
const (
	KindCall     = string(deferred.KindCall)
	KindApproval = string(deferred.KindApproval)
	KindResult   = "result"
	KindDecision = "decision"
)

// MsgID is the Nats-Msg-Id of a message about one deferred call: the same
// (run, call, kind) published twice inside the duplicate window is stored
// once.
func MsgID(runID, toolCallID, kind string) string {
	return runID + "/" + toolCallID + "/" + kind
}

// MsgID is the request's Nats-Msg-Id, MsgID(run, call, "call.<attempt>"):
// a request sent again for the same attempt is stored once, a new attempt
// is a new message.
func (r CallRequest) MsgID() string {
	return MsgID(r.RunID, r.ToolCallID, KindCall+"."+strconv.Itoa(r.Attempt))
}

// MsgID is the request's Nats-Msg-Id, MsgID(run, call, "approval.<attempt>").
func (r ApprovalRequest) MsgID() string {
	return MsgID(r.RunID, r.ToolCallID, KindApproval+"."+strconv.Itoa(r.Attempt))
}

// MsgID is the reply's Nats-Msg-Id, MsgID(run, call, "result"), so that
// the replies of two workers that both ran a redelivered call, or a
// worker's and the max-deliveries Failed reply, are stored once (first
// wins).
func (r CallReply) MsgID() string { return MsgID(r.RunID, r.ToolCallID, KindResult) }

// MsgID is the decision's Nats-Msg-Id, MsgID(run, call,
// "decision.<approver>.<hash>"), hash being a digest of the decision and
// its signature. The approver is part of the id so that one approver's
// decision never hides another's; the hash, so that a decision that merely
// names an approver (a forgery the orchestrator will refuse) does not hide
// the approver's own, which the stream would otherwise drop as a
// duplicate. A publish sent again is the same message and is still stored
// once.
func (d Decision) MsgID() (string, error) {
	body, err := d.SigningBytes()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(body)
	h.Write(d.Signature)
	return MsgID(d.RunID, d.ToolCallID, KindDecision+"."+d.ApproverID+"."+hex.EncodeToString(h.Sum(nil)[:8])), nil
}
