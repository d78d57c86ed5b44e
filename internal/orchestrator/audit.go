package orchestrator

import (
	"context"
	"log/slog"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/wire"
)

// AuditRecord is one entry of the audit stream (package wire).
type AuditRecord = wire.AuditRecord

// audit records a decision (whatever became of it) or a refused result on
// the audit stream. Its id is the reply's stream sequence, so a redelivered
// reply is recorded once. A failure is logged: the reply's effect is stored
// already and must not be undone for want of its record.
func (rp *replyPipeline) audit(ctx context.Context, convID string, d *bus.Delivery[bus.Reply], j *replyJob) {
	rp.auditAs(ctx, convID, "audit/"+d.Stream+"/"+strconv.FormatUint(d.StreamSeq, 10), d.StreamSeq, j)
}

// auditAs records j under the audit message id msgID; seq is the reply's
// stream sequence, 0 for an answer that came over HTTP.
func (rp *replyPipeline) auditAs(ctx context.Context, convID, msgID string, seq uint64, j *replyJob) {
	in := j.in
	if j.v == conversation.VerdictDuplicate || (in.decision == nil && j.v == conversation.VerdictApplied) {
		return
	}
	rec := AuditRecord{
		Kind: string(in.kind), Verdict: j.v.String(), Reason: j.reason,
		ConversationID: convID, RunID: in.runID, ToolCallID: in.callID, ToolName: j.tool,
		ReplySeq: seq, Time: rp.clock().UTC(),
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
		hdr.Set(wire.HeaderConversation, convID)
	}
	hdr.Set(wire.HeaderCall, in.callID)
	if _, err := rp.bus.PublishAudit(ctx, in.runID, msgID, rec, hdr); err != nil {
		rp.log.WarnContext(ctx, "audit record not published", slog.String("run_id", in.runID),
			slog.String("tool_call_id", in.callID), slog.String("verdict", rec.Verdict), slog.String("error", err.Error()))
	}
}
