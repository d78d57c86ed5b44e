package orchestrator

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/deferred"
)

// replyTimeout bounds the handling of one reply (KV reads and CAS writes).
const replyTimeout = 30 * time.Second

// verdict is what became of a reply.
type verdict int

const (
	verdictApplied   verdict = iota // recorded as the call's answer
	verdictDuplicate                // the call was already answered; acked
	verdictRefused                  // not acceptable; recorded, dead-lettered
	verdictLate                     // past the call's deadline; recorded, dead-lettered
)

func (v verdict) String() string {
	return [...]string{"applied", "duplicate", "refused", "late"}[v]
}

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
}

func (o *Orchestrator) consumeReplies(ctx context.Context) error {
	sub, err := o.bus.ConsumeReplies(ctx, o.cfg.ReplyConsumer, bus.ConsumeConfig{
		AckWait:    o.cfg.ReplyAckWait,
		MaxDeliver: 20,
		BackOff:    []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second},
	}, bus.HandlerFunc[bus.Reply](o.handleReply))
	if err != nil {
		return err
	}
	o.replies = sub
	return nil
}

// handleReply ends every reply explicitly: acked once its effect is in KV
// (or it is a harmless duplicate), nakked with a delay on a transient
// failure (a plain error), dead-lettered and terminated when it is refused
// (a bus.Terminal error).
func (o *Orchestrator) handleReply(ctx context.Context, d *bus.Delivery[bus.Reply]) error {
	ctx, cancel := context.WithTimeout(ctx, replyTimeout)
	defer cancel()
	in, err := incomingOf(d.Msg)
	if err != nil {
		o.stats.Refused.Add(1)
		o.stats.DeadLettered.Add(1)
		return bus.Terminal(err)
	}
	in.trustErr = o.checkTrust(in)
	log := o.log.With(slog.String("run_id", in.runID), slog.String("tool_call_id", in.callID), slog.String("kind", string(in.kind)))
	convID, err := o.store.conversationOf(ctx, in.runID)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			o.stats.Refused.Add(1)
			o.stats.DeadLettered.Add(1)
			log.WarnContext(ctx, "reply refused: unknown run")
			return bus.Terminal(fmt.Errorf("unknown run %s", in.runID))
		}
		o.stats.TransientErrors.Add(1)
		return err
	}
	v, reason, conv, err := o.apply(ctx, convID, in)
	if err != nil {
		o.stats.TransientErrors.Add(1)
		log.WarnContext(ctx, "reply not applied; will retry", slog.String("error", err.Error()))
		return err
	}
	log = log.With(slog.String("conversation_id", convID))
	switch v {
	case verdictApplied:
		o.stats.RepliesApplied.Add(1)
		if err := d.Ack(); err != nil {
			log.WarnContext(ctx, "ack reply", slog.String("error", err.Error()))
		}
		log.DebugContext(ctx, "reply applied")
		o.publishEvent(ctx, convID, in.runID, EventReplyApplied, in.callID, map[string]string{"kind": string(in.kind)})
		o.afterApply(ctx, conv)
		return nil
	case verdictDuplicate:
		o.stats.Duplicates.Add(1)
		log.InfoContext(ctx, "duplicate reply", slog.String("reason", reason))
		return nil
	case verdictLate:
		o.stats.Late.Add(1)
		o.stats.DeadLettered.Add(1)
		log.WarnContext(ctx, "late reply refused", slog.String("reason", reason))
		o.afterApply(ctx, conv)
		return bus.Terminal(fmt.Errorf("late: %s", reason))
	default:
		o.stats.Refused.Add(1)
		o.stats.DeadLettered.Add(1)
		log.WarnContext(ctx, "reply refused", slog.String("reason", reason))
		return bus.Terminal(fmt.Errorf("refused: %s", reason))
	}
}

func incomingOf(r bus.Reply) (incoming, error) {
	in := incoming{runID: r.RunID}
	switch {
	case r.Decision != nil:
		if err := r.Decision.Validate(); err != nil {
			return incoming{}, err
		}
		in.kind, in.callID, in.decision = deferred.KindApproval, r.Decision.ToolCallID, r.Decision
	case r.Call != nil:
		if err := r.Call.Validate(); err != nil {
			return incoming{}, err
		}
		in.kind, in.callID, in.result = deferred.KindCall, r.Call.ToolCallID, r.Call
	default:
		return incoming{}, errors.New("reply holds neither a result nor a decision")
	}
	return in, nil
}

// checkTrust verifies a decision's signature when trusted keys are
// configured (D36).
func (o *Orchestrator) checkTrust(in incoming) error {
	if in.decision == nil || len(o.cfg.TrustedApprovers) == 0 {
		return nil
	}
	key, ok := o.cfg.TrustedApprovers[in.decision.ApproverID]
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

// apply records a reply in the conversation by CAS and says what became of
// it. Refusals are recorded too, on the call they were meant for.
func (o *Orchestrator) apply(ctx context.Context, convID string, in incoming) (verdict, string, *Conversation, error) {
	var (
		v      verdict
		reason string
	)
	conv, err := o.store.update(ctx, convID, func(c *Conversation) error {
		now := o.clock()
		v, reason = verdictApplied, ""
		c.UpdatedAt = now
		b := c.Batch
		if b == nil || b.RunID != in.runID {
			// The run's batch is over: its calls were all answered and its
			// follow-up has taken them (or the run never paused).
			v, reason = verdictDuplicate, fmt.Sprintf("run %s is no longer waiting", in.runID)
			c.StaleReplies++
			return nil
		}
		pc := b.call(in.callID)
		if pc == nil {
			v, reason = verdictRefused, fmt.Sprintf("run %s issued no call %s", in.runID, in.callID)
			b.UnknownReplies++
			return nil
		}
		refuse := func(why string) error {
			v, reason = verdictRefused, why
			pc.Refused++
			pc.LastRefusal = why
			return nil
		}
		if pc.Kind != in.kind {
			if in.kind == deferred.KindApproval {
				return refuse(fmt.Sprintf("wrong kind: a decision for external call %s", pc.ToolCallID))
			}
			return refuse(fmt.Sprintf("wrong kind: a result for approval call %s", pc.ToolCallID))
		}
		if pc.Reply != nil {
			if pc.Reply.Expired {
				v, reason = verdictLate, fmt.Sprintf("call %s expired at %s", pc.ToolCallID, pc.Deadline.UTC().Format(time.RFC3339))
				pc.Late++
				pc.LastRefusal = reason
				return nil
			}
			v, reason = verdictDuplicate, fmt.Sprintf("call %s already answered", pc.ToolCallID)
			pc.Duplicates++
			return nil
		}
		if in.decision != nil {
			if in.decision.ArgsDigest != pc.ArgsDigest {
				return refuse(fmt.Sprintf("args digest of call %s does not match", pc.ToolCallID))
			}
			if in.trustErr != nil {
				return refuse(in.trustErr.Error())
			}
		}
		if !now.Before(pc.Deadline) {
			pc.Reply = expiredReply(pc, now)
			pc.Late++
			v, reason = verdictLate, fmt.Sprintf("call %s expired at %s", pc.ToolCallID, pc.Deadline.UTC().Format(time.RFC3339))
			pc.LastRefusal = reason
			return nil
		}
		pc.Reply = replyOf(in, now)
		return nil
	})
	if err != nil {
		return 0, "", nil, err
	}
	return v, reason, conv, nil
}

func replyOf(in incoming, now time.Time) *Reply {
	if d := in.decision; d != nil {
		r := &Reply{By: d.ApproverID, At: now}
		if d.Approved {
			r.Outcome = OutcomeApproved
			if len(d.OverrideArgs) > 0 && string(d.OverrideArgs) != "null" {
				r.OverrideArgs = d.OverrideArgs
			}
		} else {
			r.Outcome = OutcomeDenied
			r.Message = d.Message
			if r.Message == "" {
				r.Message = deferred.DefaultDenyMessage
			}
		}
		return r
	}
	res := in.result
	r := &Reply{By: res.WorkerID, At: now}
	switch res.Outcome {
	case bus.OutcomeRetry:
		r.Outcome, r.Message = OutcomeRetry, res.Message
	case bus.OutcomeFailed:
		r.Outcome, r.Message = OutcomeFailed, res.Message
	default:
		r.Outcome, r.Value, r.Content, r.Metadata = OutcomeReturn, res.Value, res.Content, res.Metadata
	}
	return r
}
