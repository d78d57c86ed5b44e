package orchestrator

import (
	"context"
	"log/slog"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// verify decodes and checks a reply before it reaches its conversation: its
// form (a malformed one is refused at once) and its size (a result over the
// limit becomes a failed one saying so). Whether a decision's signer may
// decide is for the policy of its conversation's agent, when it is applied
// (applyJobs).
func (rp *replyPipeline) verify(ctx context.Context, r bus.Reply) (incoming, error) {
	in, err := incomingOf(r)
	if err != nil {
		return incoming{}, err
	}
	if in.oversize > 0 {
		rp.log.WarnContext(ctx, "result too large; taking it as failed", slog.String("run_id", in.runID),
			slog.String("tool_call_id", in.callID), slog.Int("bytes", in.oversize), slog.Int("limit", wire.MaxReplyBytes))
	}
	in.trace = telemetry.InjectMap(ctx)
	return in, nil
}
