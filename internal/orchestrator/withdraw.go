package orchestrator

import (
	"context"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
)

// withdrawTimeout bounds one withdrawal: a read of each tool's queue, at
// most bus.MaxWithdrawScan messages.
const withdrawTimeout = 30 * time.Second

// withdraw takes the external calls among calls, of run runID, out of the
// calls work queue (bus.WithdrawCalls) once the orchestrator has settled
// them itself (cancelled, expired) or deleted their conversation, so that
// no worker runs them later. Before, the calls stayed queued: a worker that
// came after a cancel ran them (the cancel notice reaches only the workers
// running at that moment) and only then was its reply refused. A worker
// delivered a call before it was withdrawn looks it up before running it
// and skips it (docs/protocol.md). A call answered by a worker has no
// message left and is not looked for. Approval requests stay: their stream
// is not a work queue, and approvers learn the call was settled from its
// events. A failure is logged: the call is settled all the same, and a
// worker that runs it has its reply refused as late.
func (co *core) withdraw(ctx context.Context, convID, runID string, calls []*conversation.PendingCall) {
	byTool := map[string][]string{}
	for _, pc := range calls {
		if pc.Kind != deferred.KindCall || pc.Reply != nil && !pc.Reply.Cancelled && !pc.Reply.Expired {
			continue
		}
		byTool[pc.ToolName] = append(byTool[pc.ToolName], pc.ToolCallID)
	}
	if len(byTool) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, withdrawTimeout)
	defer cancel()
	for tool, ids := range byTool {
		n, err := co.bus.WithdrawCalls(ctx, tool, runID, ids)
		log := co.log.With(slog.String("conversation_id", convID), slog.String("run_id", runID), slog.String("tool", tool))
		if err != nil {
			log.WarnContext(ctx, "calls not withdrawn from the work queue; a worker that takes one runs it and its reply is refused", slog.Int("withdrawn", n), slog.String("error", err.Error()))
			continue
		}
		if n > 0 {
			log.InfoContext(ctx, "calls withdrawn from the work queue", slog.Int("withdrawn", n))
		}
	}
}
