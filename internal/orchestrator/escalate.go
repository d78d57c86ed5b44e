package orchestrator

import (
	"context"
	"log/slog"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// escalate hands approval call pc of conv, just marked escalated, to its
// tool's EscalateTo: an approval_escalated event, and its request
// published again (attempt 2, naming them) for their inbox and bots. Both
// go out after the mark is stored, once: a later expiry pass finds the
// call escalated. A failed publication is logged; the call still waits
// for its tool's approvers until its deadline.
func (rc *reconciler) escalate(ctx context.Context, conv *conversation.State, pc *conversation.PendingCall) {
	var to []string
	if ag := rc.roster.judge(conv); ag != nil {
		if tc := ag.cfg.tool(pc.ToolName); tc != nil {
			to = tc.EscalateTo
		}
	}
	runID := conv.Batch.RunID
	log := rc.log.With(slog.String("conversation_id", conv.ID), slog.String("run_id", runID), slog.String("tool_call_id", pc.ToolCallID))
	log.InfoContext(ctx, "approval escalated", slog.Any("to", to))
	rc.events.publish(ctx, conv.ID, runID, EventApprovalEscalated, pc.ToolCallID, wire.ApprovalEscalated{Tool: pc.ToolName, To: to, Deadline: pc.Deadline.UTC()})
	req := wire.ApprovalRequest{
		RunID: runID, ConversationID: conv.ID, ToolCallID: pc.ToolCallID, ToolName: pc.ToolName,
		Args: pc.Args, ArgsDigest: pc.ArgsDigest, Metadata: pc.Metadata, Deadline: pc.Deadline.UTC(), Attempt: 2, EscalatedTo: to,
		Approvers: rc.roster.approversFor(conv, pc), MayNotApprove: rc.roster.mayNotApprove(conv, pc), Caller: conv.Caller,
	}
	rc.roster.withApproversRule(conv, pc, &req)
	if tool := rc.discovery.toolOf(rc.roster.agentOf(conv).config(), runID, pc.ToolName); tool != nil {
		req.ToolDescription, req.Parameters = tool.Description, tool.Parameters
	}
	if _, err := rc.bus.PublishApproval(ctx, req, telemetry.HeaderOf(conv.Batch.Trace)); err != nil {
		log.WarnContext(ctx, "publish escalated approval request", slog.String("error", err.Error()))
	}
}
