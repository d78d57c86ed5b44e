package orchestrator

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
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

// incomingOf decodes r and checks its form and size.
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

// replyJob is one reply waiting to be recorded, and then what became of it.
type replyJob struct {
	in   incoming
	done chan struct{}
	// seq is the reply's stream sequence: a group applies its replies in
	// the order they were stored, so that of two answers to one call that
	// meet in a group the first stored wins, whichever handler joined
	// first. Answers recorded apart (one handler late to join, behind a
	// group that lingered out, or a redelivery after a nak) are applied in
	// the order they are recorded: either may win, and the other is a
	// duplicate. D35 promises one applied answer, not which.
	seq uint64

	v      conversation.Verdict
	reason string
	err    error
	// Of the call the reply answers, when the run's batch has it: its tool,
	// when it was published, and whether this reply found it past its
	// deadline and settled it as expired.
	tool        string
	publishedAt time.Time
	at          time.Time
	expired     bool
	// dispatched is the call, set when the reply approved a call that
	// then went to its tool's workers (conversation.State.Dispatch).
	dispatched *wire.PendingCall
}
