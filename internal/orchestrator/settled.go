package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/wire"
)

// Approvers keep seeing approval requests in TOOLGATE_APPROVALS long after
// they were settled, and the events that told of it go with a deleted
// conversation. So this replica answers, from the conversations' state,
// whether requests are still pending (wire.SubjectApprovalStatus), and
// tells the outcome of every decision it handles (wire.OutcomeSubject), so
// that an approver shows and decides only what is pending and learns when
// its decision was refused.

// statusTimeout bounds the answer to one status request.
const statusTimeout = 10 * time.Second

// serveApprovalStatus answers status requests until ctx ends (as Stop
// begins: a request after that goes to another replica, or unanswered).
func (co *core) serveApprovalStatus(ctx context.Context) error {
	sub, err := co.bus.Conn().QueueSubscribe(wire.SubjectApprovalStatus, wire.ApprovalStatusQueue, func(m *nats.Msg) {
		co.answerApprovalStatus(ctx, m)
	})
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", wire.SubjectApprovalStatus, err)
	}
	co.loops.Go(func() {
		<-ctx.Done()
		_ = sub.Unsubscribe()
	})
	return nil
}

func (co *core) answerApprovalStatus(ctx context.Context, m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	var req wire.ApprovalStatusRequest
	reply := wire.ApprovalStatusReply{Calls: []wire.ApprovalStatus{}}
	switch err := json.Unmarshal(m.Data, &req); {
	case err != nil:
		reply.Error = "request: " + err.Error()
	case len(req.Calls) > wire.MaxStatusCalls:
		reply.Error = fmt.Sprintf("request: %d calls, at most %d", len(req.Calls), wire.MaxStatusCalls)
	default:
		for _, ref := range req.Calls {
			st, err := co.approvalStatus(ctx, ref)
			if err != nil {
				co.log.WarnContext(ctx, "approval status", slog.String("run_id", ref.RunID), slog.String("error", err.Error()))
				reply = wire.ApprovalStatusReply{Calls: []wire.ApprovalStatus{}, Error: "status unknown for now"}
				break
			}
			reply.Calls = append(reply.Calls, st)
		}
	}
	data, err := json.Marshal(reply)
	if err != nil {
		return
	}
	_ = m.Respond(data)
}

// approvalStatus is where the approval ref names stands. A run no
// conversation has (its conversation deleted) is unknown, so never pending.
func (co *core) approvalStatus(ctx context.Context, ref wire.CallRef) (wire.ApprovalStatus, error) {
	st := wire.ApprovalStatus{RunID: ref.RunID, ToolCallID: ref.ToolCallID, State: wire.StateUnknown}
	if wire.ValidateToken("run id", ref.RunID) != nil || ref.ToolCallID == "" {
		return st, nil
	}
	convID, err := co.store.conversationOf(ctx, ref.RunID)
	if errors.Is(err, ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	c, _, err := co.store.refresh(ctx, convID)
	if errors.Is(err, ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	if c.Status == conversation.StatusDeleted {
		return st, nil
	}
	st.State = approvalState(c, ref, co.clock())
	for _, d := range c.Decisions {
		if d.RunID == ref.RunID && d.ToolCallID == ref.ToolCallID && !d.Expired {
			st.State, st.By = wire.StateDecided, d.ApproverID
		}
	}
	return st, nil
}

func approvalState(c *conversation.State, ref wire.CallRef, now time.Time) string {
	if c.Batch == nil || c.Batch.RunID != ref.RunID {
		if c.Status == conversation.StatusCancelled {
			return wire.StateCancelled
		}
		return wire.StateOver
	}
	for _, pc := range c.Batch.Calls {
		if pc.ToolCallID != ref.ToolCallID || pc.Kind != deferred.KindApproval {
			continue
		}
		switch r := pc.Reply; {
		case r == nil && c.Status.Ended():
			if c.Status == conversation.StatusCancelled {
				return wire.StateCancelled
			}
			return wire.StateOver
		case r == nil && !pc.Deadline.IsZero() && !now.Before(pc.Deadline):
			return wire.StateExpired
		case r == nil:
			return wire.StatePending
		case r.Cancelled:
			return wire.StateCancelled
		case r.Expired:
			return wire.StateExpired
		default:
			return wire.StateDecided
		}
	}
	return wire.StateOver
}

// tellOutcome publishes what became of a decision, for the approver that
// sent it (a result's worker is told nothing). Best effort: the decision's
// effect is stored whether or not anyone hears this.
func (rp *replyPipeline) tellOutcome(d *bus.Delivery[bus.Reply], in incoming, verdict, reason string) {
	dec := in.decision
	if dec == nil {
		return
	}
	id := d.Header.Get(nats.MsgIdHdr)
	if id == "" {
		id, _ = dec.MsgID()
	}
	subj, err := wire.OutcomeSubject(dec.RunID)
	if err != nil {
		return
	}
	data, err := json.Marshal(wire.DecisionOutcome{
		RunID: dec.RunID, ToolCallID: dec.ToolCallID, ApproverID: dec.ApproverID,
		DecisionID: id, Verdict: verdict, Reason: reason,
	})
	if err != nil {
		return
	}
	_ = rp.bus.Conn().Publish(subj, data)
}
