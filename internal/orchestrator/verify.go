package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// incoming is a decoded reply: a decision or a result.
type incoming struct {
	runID    string
	callID   string
	kind     deferred.Kind // the category the reply subject claims
	decision *wire.Decision
	result   *wire.CallReply
	// trustErr is why the decision may not count under the policy of its
	// conversation's agent (agentPolicy.check); set when it is applied.
	trustErr error
	// quorum is how many distinct approvers the decided call needs.
	quorum int
	// http says the decision came over HTTP (Answer), unsigned;
	// identified that its approver is a user the API names.
	http, identified bool
	// trace is the context of the span that consumes the reply, kept with
	// the applied reply for the follow-up it may complete.
	trace map[string]string
	// oversize is the size of a result over wire.MaxReplyBytes, which
	// result replaces with a failed one saying so.
	oversize int
	// meta is the metadata a decision (on the bus, or an answer over HTTP)
	// gives an approved call's tool.
	meta json.RawMessage
}

// answer is in as its conversation applies it.
func (in incoming) answer() conversation.Answer {
	return conversation.Answer{RunID: in.runID, CallID: in.callID, Kind: in.kind, Decision: in.decision, Result: in.result,
		TrustErr: in.trustErr, Quorum: in.quorum, Trace: in.trace, Metadata: in.meta}
}

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

func incomingOf(r bus.Reply) (incoming, error) {
	in := incoming{runID: r.RunID}
	switch {
	case r.Decision != nil:
		if err := r.Decision.Validate(); err != nil {
			return incoming{}, err
		}
		in.kind, in.callID, in.decision = deferred.KindApproval, r.Decision.ToolCallID, r.Decision
		in.meta = r.Decision.Metadata
	case r.Call != nil:
		if err := r.Call.Validate(); err != nil {
			return incoming{}, err
		}
		res, ok := r.Call.WithinLimit()
		if !ok {
			in.oversize = r.Call.PayloadBytes()
		}
		in.kind, in.callID, in.result = deferred.KindCall, r.Call.ToolCallID, &res
	default:
		return incoming{}, errors.New("reply holds neither a result nor a decision")
	}
	if err := checkReplySize(r); err != nil {
		return incoming{}, err
	}
	return in, nil
}
