package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// replyTimeout bounds the handling of one reply (KV reads and CAS writes).
const replyTimeout = 30 * time.Second

// replyConcurrency is the number of replies handled at once, each by its
// own handler (bus.ConsumeConfig.Dispatch): a handler waits while its
// conversation's group is written, so many replies must be in hand at once
// for the groups to be large. Replies of one conversation handled at the
// same time are recorded by one CAS (see groupCommit).
const replyConcurrency = 256

// replyPrefetch is the pull batch of each dispatch loop.
const replyPrefetch = 64

// replyPullExpiry bounds how long a stalled pull holds the replies back:
// in the benchmark's resume of 5,000 paused conversations, about one run in
// five had nats.go's consume loop wait with no pull on the server
// (consumer info: 2,830 replies pending, 0 pulls waiting, 0 unacked) until
// two heartbeats were missed, 10 s with the default expiry of AckWait/3;
// the resume took 10.9 s instead of 1.5 (with 2 s, 2.6-2.9 s; nats.go
// allows no less than 1 s). The loop skips its next pull while the last is
// still being sent, and a batch handled within that moment leaves it with
// none. An idle orchestrator pulls again every replyPullExpiry instead,
// which costs nothing worth counting.
const replyPullExpiry = time.Second

// consumeReplies consumes the durable shared by every replica: every reply
// where replies are not partitioned, and otherwise those stored before
// they were (ownership.go consumes the partitions).
func (rp *replyPipeline) consumeReplies(ctx context.Context) error {
	sub, err := rp.bus.ConsumeUnpartitionedReplies(ctx, rp.cfg.ReplyConsumer, rp.consumeConfig(), bus.HandlerFunc[bus.Reply](rp.handleReply))
	if err != nil {
		return err
	}
	rp.replies = sub
	return nil
}

// consumeConfig is the reply durables' configuration.
func (rp *replyPipeline) consumeConfig() bus.ConsumeConfig {
	return bus.ConsumeConfig{
		AckWait:         rp.cfg.ReplyAckWait,
		MaxDeliver:      20,
		BackOff:         []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second},
		Concurrency:     replyConcurrency,
		Dispatch:        true,
		Slots:           rp.slots,
		PullMaxMessages: replyPrefetch,
		PullExpiry:      replyPullExpiry,
	}
}

// handleReply ends every reply explicitly: acked once its effect is in its
// conversation's log (or it is a harmless duplicate), nakked with a delay on
// a transient failure (a plain error), dead-lettered and terminated when it
// is refused (a bus.Terminal error). The steps are verify, record (the
// group commit, which applies it) and settle; what became of it is told to
// the observer once.
func (rp *replyPipeline) handleReply(ctx context.Context, d *bus.Delivery[bus.Reply]) (herr error) {
	ctx, cancel := context.WithTimeout(ctx, replyTimeout)
	defer cancel()
	ctx, span := telemetry.StartConsumer(ctx, rp.tracer, "process toolgate.reply."+d.Msg.Kind, d.Subject, d.Header,
		telemetry.AttrRunID.String(d.Msg.RunID), telemetry.AttrToolCallID.String(d.Msg.ToolCallID()),
		telemetry.AttrKind.String(d.Msg.Kind), telemetry.AttrDelivered.Int64(int64(d.NumDelivered)))
	obs := replyObservation{kind: d.Msg.Kind, redelivered: d.NumDelivered > 1}
	defer func() {
		span.SetAttributes(attribute.String("toolgate.verdict", obs.verdict))
		if obs.tool != "" {
			span.SetAttributes(telemetry.AttrTool.String(obs.tool))
		}
		if herr != nil {
			span.SetStatus(codes.Error, obs.verdict)
		}
		span.End()
		rp.observer.reply(obs)
	}()
	in, err := rp.verify(ctx, d.Msg)
	if err != nil {
		obs.verdict = replyInvalid
		return bus.Terminal(err)
	}
	convID, err := rp.store.conversationOf(ctx, in.runID)
	if errors.Is(err, ErrNotFound) {
		return rp.unknownRun(ctx, d, in, &obs)
	}
	if err != nil {
		obs.verdict = replyError
		return err
	}
	span.SetAttributes(telemetry.AttrConversationID.String(convID))
	j := &replyJob{in: in, done: make(chan struct{}), seq: d.StreamSeq}
	if err := rp.commits.record(ctx, convID, j); err != nil {
		obs.verdict = replyError
		return err
	}
	return rp.settle(ctx, d, convID, j, &obs)
}

// settle ends a recorded reply as its verdict says: acked when applied,
// left to the consumer's ack when a duplicate, terminated (and so
// dead-lettered) when late or refused, nakked when it could not be recorded.
func (rp *replyPipeline) settle(ctx context.Context, d *bus.Delivery[bus.Reply], convID string, j *replyJob, obs *replyObservation) error {
	log := rp.replyLog(j.in, convID)
	obs.tool = j.tool
	if errors.Is(j.err, ErrNotFound) {
		// The run id names a conversation that does not exist.
		return rp.unknownRun(ctx, d, j.in, obs)
	}
	if j.err != nil {
		obs.verdict = replyError
		log.WarnContext(ctx, "reply not applied; will retry", slog.String("error", j.err.Error()))
		return j.err
	}
	obs.recorded(j)
	if j.v == conversation.VerdictElsewhere {
		// Nakked, so that the consumer gives it to another replica; one
		// that holds the config judges it.
		log.InfoContext(ctx, "decision left to the replicas of its conversation's agent config", slog.String("reason", j.reason))
		if err := d.NakWithDelay(handOverDelay()); err != nil {
			log.WarnContext(ctx, "nak reply", slog.String("error", err.Error()))
		}
		return nil
	}
	rp.audit(ctx, convID, d, j)
	rp.tellOutcome(d, j.in, j.v.String(), j.reason)
	switch j.v {
	case conversation.VerdictApplied, conversation.VerdictCounted:
		if err := d.Ack(); err != nil {
			log.WarnContext(ctx, "ack reply", slog.String("error", err.Error()))
		}
		log.DebugContext(ctx, "reply applied")
		return nil
	case conversation.VerdictDuplicate:
		log.InfoContext(ctx, "duplicate reply", slog.String("reason", j.reason))
		return nil
	case conversation.VerdictLate:
		log.WarnContext(ctx, "late reply refused", slog.String("reason", j.reason))
		return bus.Terminal(fmt.Errorf("late: %s", j.reason))
	default:
		log.WarnContext(ctx, "reply refused", slog.String("reason", j.reason))
		return bus.Terminal(fmt.Errorf("refused: %s", j.reason))
	}
}

// handOverDelay is the pause before a decision this replica handed over
// is delivered again, to any replica. It outlasts the pull that took it
// (replyPullExpiry): a pull stays first in the server's line of waiting
// pulls until it is full or expires, so that a shorter pause gave it back
// to this replica's same pull every time (20 deliveries in a row in a test
// of two replicas, then the dead letter), not to the replica that holds
// the config. The deliveries the consumer allows (MaxDeliver) then last
// about half a minute.
func handOverDelay() time.Duration { return replyPullExpiry + 500*time.Millisecond }

// unknownRun refuses a reply to a run no conversation has.
func (rp *replyPipeline) unknownRun(ctx context.Context, d *bus.Delivery[bus.Reply], in incoming, obs *replyObservation) error {
	obs.verdict = replyUnknownRun
	rp.replyLog(in, "").WarnContext(ctx, "reply refused: unknown run")
	rp.audit(ctx, "", d, &replyJob{in: in, v: conversation.VerdictRefused, reason: "unknown run " + in.runID})
	rp.tellOutcome(d, in, replyUnknownRun, "unknown run "+in.runID)
	return bus.Terminal(fmt.Errorf("unknown run %s", in.runID))
}

// Verdicts of replies that never reach a conversation, as metric labels
// beside verdict.String().
const (
	replyInvalid    = "invalid"     // malformed; dead-lettered
	replyUnknownRun = "unknown_run" // for a run no conversation has; dead-lettered
	replyError      = "error"       // not recorded for now; redelivered
)

func (rp *replyPipeline) replyLog(in incoming, convID string) *slog.Logger {
	log := rp.log.With(slog.String("run_id", in.runID), slog.String("tool_call_id", in.callID), slog.String("kind", string(in.kind)))
	if convID != "" {
		log = log.With(slog.String("conversation_id", convID))
	}
	return log
}

// The data of the reply events (package wire).
type (
	replyAppliedData = wire.ReplyApplied
	replyRefusedData = wire.ReplyRefused
	callsExpiredData = wire.CallsExpired
)

// replyEvents publishes what a recorded reply changed: the call answered,
// or the reply refused and why; and the call expired if the reply found it
// past its deadline.
func (rp *replyPipeline) replyEvents(ctx context.Context, convID string, j *replyJob) {
	in := j.in
	if j.expired {
		rp.events.publish(ctx, convID, in.runID, EventCallsExpired, "", callsExpiredData{Calls: 1, ToolCallIDs: []string{in.callID}})
	}
	switch j.v {
	case conversation.VerdictApplied:
		data := replyAppliedData{Kind: string(in.kind)}
		if d := in.decision; d != nil {
			approved := d.Approved
			data.Approved, data.ApproverID, data.Message = &approved, d.ApproverID, d.Message
			if !approved && data.Message == "" {
				data.Message = deferred.DefaultDenyMessage
			}
		} else if r := in.result; r != nil {
			data.Outcome, data.WorkerID = string(r.Outcome), r.WorkerID
			if data.Outcome == "" {
				data.Outcome = string(wire.OutcomeReturn)
			}
		}
		rp.events.publish(ctx, convID, in.runID, EventReplyApplied, in.callID, data)
		if j.dispatched != nil {
			rp.events.publish(ctx, convID, in.runID, EventCallDispatched, in.callID, *j.dispatched)
		}
	case conversation.VerdictRefused, conversation.VerdictLate:
		rp.events.publish(ctx, convID, in.runID, EventReplyRefused, in.callID, replyRefusedData{Kind: string(in.kind), Verdict: j.v.String(), Reason: j.reason})
	}
}
