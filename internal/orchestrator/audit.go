package orchestrator

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
)

// AuditRecord is one entry of the audit stream TOOLGATE_AUDIT, on
// toolgate.audit.<run_id>: a decision and what became of it (applied,
// refused, late), or a result that was refused, with the reason. The
// approver a decision names, and whether it was signed, are kept here for
// as long as the stream keeps records (SetupConfig.AuditMaxAge; forever by
// default), after the conversation has moved on.
type AuditRecord struct {
	// Kind is the reply's category: "approval" (a decision) or "call" (a
	// result).
	Kind string `json:"kind" msgpack:"kind"`
	// Verdict is applied, refused or late.
	Verdict        string          `json:"verdict" msgpack:"verdict"`
	Reason         string          `json:"reason,omitempty" msgpack:"reason,omitempty"`
	ConversationID string          `json:"conversation_id,omitempty" msgpack:"conversation_id,omitempty"`
	RunID          string          `json:"run_id" msgpack:"run_id"`
	ToolCallID     string          `json:"tool_call_id" msgpack:"tool_call_id"`
	ToolName       string          `json:"tool_name,omitempty" msgpack:"tool_name,omitempty"`
	ApproverID     string          `json:"approver_id,omitempty" msgpack:"approver_id,omitempty"`
	Approved       *bool           `json:"approved,omitempty" msgpack:"approved,omitempty"`
	Signed         bool            `json:"signed,omitempty" msgpack:"signed,omitempty"`
	ArgsDigest     string          `json:"args_digest,omitempty" msgpack:"args_digest,omitempty"`
	OverrideArgs   json.RawMessage `json:"override_args,omitempty" msgpack:"override_args,omitempty"`
	Message        string          `json:"message,omitempty" msgpack:"message,omitempty"`
	WorkerID       string          `json:"worker_id,omitempty" msgpack:"worker_id,omitempty"`
	// ReplySeq is the reply's sequence in TOOLGATE_REPLIES.
	ReplySeq uint64    `json:"reply_seq" msgpack:"reply_seq"`
	Time     time.Time `json:"time" msgpack:"time"`
}

// audit records a decision (whatever became of it) or a refused result on
// the audit stream. Its id is the reply's stream sequence, so a redelivered
// reply is recorded once. A failure is logged: the reply's effect is in KV
// already and must not be undone for want of its record.
func (o *Orchestrator) audit(ctx context.Context, convID string, d *bus.Delivery[bus.Reply], j *replyJob) {
	in := j.in
	if j.v == verdictDuplicate || (in.decision == nil && j.v == verdictApplied) {
		return
	}
	rec := AuditRecord{
		Kind: string(in.kind), Verdict: j.v.String(), Reason: j.reason,
		ConversationID: convID, RunID: in.runID, ToolCallID: in.callID, ToolName: j.tool,
		ReplySeq: d.StreamSeq, Time: o.clock().UTC(),
	}
	if dec := in.decision; dec != nil {
		approved := dec.Approved
		rec.ApproverID, rec.Approved, rec.Signed = dec.ApproverID, &approved, len(dec.Signature) > 0
		rec.ArgsDigest, rec.OverrideArgs, rec.Message = dec.ArgsDigest, dec.OverrideArgs, dec.Message
	}
	if r := in.result; r != nil {
		rec.WorkerID, rec.Message = r.WorkerID, r.Message
	}
	hdr := nats.Header{}
	if convID != "" {
		hdr.Set(bus.HeaderConversation, convID)
	}
	hdr.Set(bus.HeaderCall, in.callID)
	msgID := "audit/" + d.Stream + "/" + strconv.FormatUint(d.StreamSeq, 10)
	if _, err := o.bus.PublishAudit(ctx, in.runID, msgID, rec, hdr); err != nil {
		o.log.WarnContext(ctx, "audit record not published", slog.String("run_id", in.runID),
			slog.String("tool_call_id", in.callID), slog.String("verdict", rec.Verdict), slog.String("error", err.Error()))
	}
}
