package approver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// ErrNoOrchestrator says no orchestrator answered a status request: none
// runs (or an earlier build, which does not serve it). What is pending is
// then unknown, and no outcome of a decision will come either.
var ErrNoOrchestrator = errors.New("no orchestrator answers approval status requests")

// statusTimeout bounds one status request.
const statusTimeout = 10 * time.Second

// Statuses asks the orchestrator where the calls of reqs stand. The
// answer maps each call (RunID, ToolCallID) to its status; with
// ErrNoOrchestrator (or another error) it is nil and nothing is known.
func Statuses(ctx context.Context, b *bus.Bus, reqs []wire.ApprovalRequest) (map[CallRef]wire.ApprovalStatus, error) {
	out := make(map[CallRef]wire.ApprovalStatus, len(reqs))
	for start := 0; start < len(reqs); start += wire.MaxStatusCalls {
		chunk := reqs[start:min(start+wire.MaxStatusCalls, len(reqs))]
		q := wire.ApprovalStatusRequest{Calls: make([]wire.CallRef, 0, len(chunk))}
		for _, r := range chunk {
			q.Calls = append(q.Calls, wire.CallRef{RunID: r.RunID, ToolCallID: r.ToolCallID})
		}
		data, err := json.Marshal(q)
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, statusTimeout)
		m, err := b.Conn().RequestWithContext(rctx, wire.SubjectApprovalStatus, data)
		cancel()
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			return nil, ErrNoOrchestrator
		case err != nil:
			return nil, fmt.Errorf("approval status: %w", err)
		}
		var rep wire.ApprovalStatusReply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			return nil, fmt.Errorf("approval status: %w", err)
		}
		if rep.Error != "" {
			return nil, fmt.Errorf("approval status: the orchestrator answered: %s", rep.Error)
		}
		for _, s := range rep.Calls {
			out[CallRef{s.RunID, s.ToolCallID}] = s
		}
	}
	return out, nil
}

// CallRef names one call: its run and tool call id.
type CallRef struct{ RunID, ToolCallID string }

// Ref is the call req asks about.
func Ref(req wire.ApprovalRequest) CallRef { return CallRef{req.RunID, req.ToolCallID} }

// Status is the status of one request (Statuses of one).
func Status(ctx context.Context, b *bus.Bus, req wire.ApprovalRequest) (wire.ApprovalStatus, error) {
	m, err := Statuses(ctx, b, []wire.ApprovalRequest{req})
	if err != nil {
		return wire.ApprovalStatus{}, err
	}
	st, ok := m[Ref(req)]
	if !ok {
		return wire.ApprovalStatus{}, fmt.Errorf("approval status: no answer for %s/%s", req.RunID, req.ToolCallID)
	}
	return st, nil
}

// RefusedError says the orchestrator did not apply a decision.
type RefusedError struct {
	RunID, ToolCallID string
	// Verdict is wire.VerdictRefused, VerdictLate, VerdictDuplicate or
	// VerdictUnknownRun, or a state (wire.StateDecided, …) when the
	// outcome was learnt from the call's status instead.
	Verdict string
	Reason  string
}

// Settled reports whether the call no longer waits for a decision, so
// that deciding it again is useless: every verdict but refused (a wrong
// digest or signature leaves the call pending).
func (e *RefusedError) Settled() bool { return e.Verdict != wire.VerdictRefused }

func (e *RefusedError) Error() string {
	s := fmt.Sprintf("the orchestrator refused the decision on %s/%s (%s)", e.RunID, e.ToolCallID, e.Verdict)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// ErrNoOutcome says the decision was stored but no outcome came in time:
// the orchestrator will apply or refuse it when it gets to it.
var ErrNoOutcome = errors.New("decision published, but the orchestrator has not said what it did with it")

// SendDecision publishes d and waits up to timeout for the orchestrator's
// outcome (docs/protocol.md, The outcome of a decision). It returns nil
// when d was applied, a *RefusedError when it was not, ErrNoOutcome when
// the orchestrator did not say in time, ErrNoOrchestrator when none
// answers. A publish that fails is returned as it is (the decision may be
// sent again: it keeps its Nats-Msg-Id).
func SendDecision(ctx context.Context, b *bus.Bus, d wire.Decision, timeout time.Duration, hdr ...nats.Header) error {
	s := decisionSender{bus: b, timeout: timeout}
	return s.send(ctx, d, hdr...)
}

type decisionSender struct {
	bus     *bus.Bus
	timeout time.Duration
}

func (s decisionSender) send(ctx context.Context, d wire.Decision, hdr ...nats.Header) error {
	id, err := d.MsgID()
	if err != nil {
		return err
	}
	subj, err := wire.OutcomeSubject(d.RunID)
	if err != nil {
		return err
	}
	// Subscribed before the decision goes out: outcomes are not stored.
	outcomes := make(chan wire.DecisionOutcome, 8)
	sub, err := s.bus.Conn().Subscribe(subj, func(m *nats.Msg) {
		var o wire.DecisionOutcome
		if json.Unmarshal(m.Data, &o) == nil && o.DecisionID == id {
			select {
			case outcomes <- o:
			default:
			}
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to the outcome: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	fctx, cancel := context.WithTimeout(ctx, statusTimeout)
	err = s.bus.Conn().FlushWithContext(fctx)
	cancel()
	if err != nil {
		return fmt.Errorf("subscribe to the outcome: %w", err)
	}
	ack, err := s.bus.PublishDecision(ctx, d, hdr...)
	if err != nil {
		return err
	}
	req := wire.ApprovalRequest{RunID: d.RunID, ToolCallID: d.ToolCallID}
	if ack.Duplicate {
		// The same decision was stored before and its outcome told then.
		return s.fromStatus(ctx, req, d.ApproverID)
	}
	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	select {
	case o := <-outcomes:
		switch o.Verdict {
		case wire.VerdictApplied:
			return nil
		case wire.VerdictDuplicate:
			// The call has its answer: maybe this approver's own, an
			// earlier decision or this one applied before the orchestrator
			// restarted and handled it again. The call's status says whose.
			return s.fromStatus(ctx, req, d.ApproverID)
		}
		return &RefusedError{RunID: d.RunID, ToolCallID: d.ToolCallID, Verdict: o.Verdict, Reason: o.Reason}
	case <-timer.C:
		return s.fromStatus(ctx, req, d.ApproverID)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fromStatus tells what became of a decision whose outcome was not heard,
// from its call's status: decided by this approver is applied.
func (s decisionSender) fromStatus(ctx context.Context, req wire.ApprovalRequest, approverID string) error {
	st, err := Status(ctx, s.bus, req)
	switch {
	case err != nil:
		return err
	case st.State == wire.StateDecided && st.By == approverID:
		return nil
	case st.Pending():
		return ErrNoOutcome
	}
	reason := "the call is " + st.State
	if st.By != "" {
		reason += " by " + st.By
	}
	return &RefusedError{RunID: req.RunID, ToolCallID: req.ToolCallID, Verdict: st.State, Reason: reason}
}

// StatusServed reports whether an orchestrator answers status requests:
// nil when one does, ErrNoOrchestrator when none runs.
func StatusServed(ctx context.Context, b *bus.Bus) error {
	rctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	_, err := b.Conn().RequestWithContext(rctx, wire.SubjectApprovalStatus, []byte(`{"calls":[]}`))
	if errors.Is(err, nats.ErrNoResponders) {
		return ErrNoOrchestrator
	}
	return err
}
