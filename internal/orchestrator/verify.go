package orchestrator

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/telemetry"
)

// incoming is a decoded reply: a decision or a result.
type incoming struct {
	runID    string
	callID   string
	kind     deferred.Kind // the category the reply subject claims
	decision *bus.Decision
	result   *bus.CallReply
	// trustErr is why the decision's signer is not trusted; nil if it is or
	// no keys are configured.
	trustErr error
	// trace is the context of the span that consumes the reply, kept with
	// the applied reply for the follow-up it may complete.
	trace map[string]string
	// oversize is the size of a result over bus.MaxReplyBytes, which
	// result replaces with a failed one saying so.
	oversize int
	// meta is the metadata a decision (on the bus, or an answer over HTTP)
	// gives an approved call's tool.
	meta json.RawMessage
}

// verify decodes and checks a reply before it reaches its conversation: its
// form (a malformed one is refused at once), its size (a result over the
// limit becomes a failed one saying so) and, for a decision, whether its
// signer is trusted (kept on it: the refusal is recorded on the call).
func (rp *replyPipeline) verify(ctx context.Context, r bus.Reply) (incoming, error) {
	in, err := incomingOf(r)
	if err != nil {
		return incoming{}, err
	}
	if in.oversize > 0 {
		rp.log.WarnContext(ctx, "result too large; taking it as failed", slog.String("run_id", in.runID),
			slog.String("tool_call_id", in.callID), slog.Int("bytes", in.oversize), slog.Int("limit", bus.MaxReplyBytes))
	}
	in.trustErr = rp.checkTrust(in)
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

// checkTrust verifies a decision's signature when trusted keys are
// configured (D36).
func (rp *replyPipeline) checkTrust(in incoming) error {
	if in.decision == nil || len(rp.cfg.TrustedApprovers) == 0 {
		return nil
	}
	key, ok := rp.cfg.TrustedApprovers[in.decision.ApproverID]
	if !ok {
		return fmt.Errorf("approver %q is not trusted", in.decision.ApproverID)
	}
	if len(in.decision.Signature) == 0 {
		return fmt.Errorf("decision from %s is not signed", in.decision.ApproverID)
	}
	if err := in.decision.Verify(ed25519.PublicKey(key)); err != nil {
		return fmt.Errorf("decision from %s: %w", in.decision.ApproverID, err)
	}
	return nil
}
