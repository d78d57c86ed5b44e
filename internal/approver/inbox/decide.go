package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/wire"
)

// ErrNotPending is returned by Decide for a request the inbox does not hold
// (never seen, already decided, expired or settled elsewhere).
var ErrNotPending = errors.New("not pending")

// Decide publishes a human's decision on a held request and lets the
// request go. Edited args the tool's schema refuses are an
// *approver.ArgsError, and nothing is sent; so is a decision on a call
// this approver may not decide (not shown here), an
// *approver.NotAdmittedError.
func (in *Inbox) Decide(ctx context.Context, runID, toolCallID string, c approver.Choice) (wire.Decision, error) {
	key := keyOf(runID, toolCallID)
	e, ok := in.store.get(key)
	if !ok {
		return wire.Decision{}, in.notHeld("decide", key)
	}
	if in.store.isSent(key) {
		return wire.Decision{}, fmt.Errorf("decide %s: %w (decided here; waiting for its outcome)", key, ErrNotPending)
	}
	if err := approver.Admit(e.req, in.cfg.ID, c.Approve); err != nil {
		in.cfg.Metrics.Handled(in.cfg.ID, "refused")
		return wire.Decision{}, err
	}
	d, err := approver.NewDecision(e.req, in.cfg.ID, c, in.cfg.Key, in.cfg.Clock())
	if err != nil {
		return wire.Decision{}, err
	}
	if !e.req.Deadline.IsZero() && !d.DecidedAt.Before(e.req.Deadline) {
		return wire.Decision{}, fmt.Errorf("decide %s: %w (expired)", key, ErrNotPending)
	}
	pending, err := in.send(ctx, key, d)
	if err != nil {
		return wire.Decision{}, err
	}
	in.decided.add(d)
	outcome := "denied"
	if d.Approved {
		outcome = "approved"
	}
	in.cfg.Metrics.Handled(in.cfg.ID, outcome)
	in.cfg.Metrics.Decided(in.cfg.ID, outcome, d.DecidedAt.Sub(e.received))
	if pending && in.store.markSent(key, d, in.cfg.Clock()) {
		// Held, not shown, until the call's status tells whether it was
		// applied (syncStatus).
		in.log.WarnContext(ctx, "decision published; the orchestrator has not said yet what it did with it: the request is held until its status tells",
			slog.String("run_id", runID), slog.String("tool_call_id", toolCallID), slog.String("outcome", outcome))
		return d, approver.ErrNoOutcome
	}
	if e, ok := in.store.remove(key, outcome+" here"); ok {
		_ = e.msg.Ack()
	}
	in.log.InfoContext(ctx, "decision published", slog.String("run_id", runID), slog.String("tool_call_id", toolCallID),
		slog.String("outcome", outcome), slog.Bool("override_args", len(d.OverrideArgs) != 0),
		slog.Bool("signed", d.Signature != nil))
	return d, nil
}

// notHeld says why the request key is not held, for what the inbox was
// asked to do with it: its approver may not decide it (the
// *approver.NotAdmittedError), or it is not pending (ErrNotPending, with
// why it left when the inbox remembers).
func (in *Inbox) notHeld(what, key string) error {
	if err := in.store.refusal(key); err != nil {
		in.cfg.Metrics.Handled(in.cfg.ID, "refused")
		return err
	}
	if r := in.store.reason(key); r != "" {
		return fmt.Errorf("%s %s: %w (%s)", what, key, ErrNotPending, r)
	}
	return fmt.Errorf("%s %s: %w", what, key, ErrNotPending)
}

// send publishes d, after asking whether its request is still pending,
// and waits for the orchestrator's outcome when one answers. A request
// settled meanwhile is ErrNotPending and leaves the inbox; a decision the
// orchestrator refuses is a *approver.RefusedError (the request leaves the
// inbox unless the call still waits, e.g. for a signature it trusts).
// pending says the orchestrator did not say in time what it did with d.
func (in *Inbox) send(ctx context.Context, key string, d wire.Decision) (pending bool, err error) {
	req := wire.ApprovalRequest{RunID: d.RunID, ToolCallID: d.ToolCallID}
	st, err := approver.Status(ctx, in.cfg.Bus, req)
	switch {
	case errors.Is(err, approver.ErrNoOrchestrator):
		if _, err := in.cfg.Bus.PublishDecision(ctx, d); err != nil {
			return false, fmt.Errorf("decide %s: %w", key, err)
		}
		return false, nil
	case err != nil:
		return false, fmt.Errorf("decide %s: %w", key, err)
	case !st.Pending():
		in.release(key, "settled:"+st.State)
		return false, fmt.Errorf("decide %s: %w (%s)", key, ErrNotPending, st.State)
	}
	err = approver.SendDecision(ctx, in.cfg.Bus, d, in.cfg.OutcomeTimeout)
	var refused *approver.RefusedError
	switch {
	case errors.As(err, &refused):
		in.log.WarnContext(ctx, "decision refused by the orchestrator", slog.String("run_id", d.RunID),
			slog.String("tool_call_id", d.ToolCallID), slog.String("verdict", refused.Verdict), slog.String("reason", refused.Reason))
		in.cfg.Metrics.Handled(in.cfg.ID, "refused")
		if refused.Settled() {
			in.release(key, "refused: "+refused.Reason)
		}
		return false, err
	case errors.Is(err, approver.ErrNoOutcome):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("decide %s: %w", key, err)
	}
	return false, nil
}

// release acks and removes a held request for reason.
func (in *Inbox) release(key, reason string) {
	if e, ok := in.store.remove(key, reason); ok {
		_ = e.msg.Ack()
	}
}

// Pending lists the held requests, oldest first.
func (in *Inbox) Pending() []Item {
	items, _ := in.store.snapshot()
	return items
}

// sentOutcome says what became of the decision made here on held request
// e, whose outcome did not come, now that its call's status is st: removed
// with why when the call no longer waits, its reason for the page's
// "remove" event ("applied here", or "not applied: …").
func (in *Inbox) sentOutcome(e *entry, st wire.ApprovalStatus) (string, bool) {
	what := fmt.Sprintf("your %s of %s (%s)", verb(e.sent.d), e.req.ToolName, e.req.ToolCallID)
	switch {
	case st.Pending():
		return "", false
	case st.State == wire.StateDecided && st.By == in.cfg.ID:
		in.log.Info("decision applied", slog.String("run_id", e.req.RunID), slog.String("tool_call_id", e.req.ToolCallID))
		return "applied here", true
	case st.By != "":
		in.decided.forget(e.key())
		return fmt.Sprintf("not applied: %s came after %s's decision", what, st.By), true
	}
	in.decided.forget(e.key())
	return fmt.Sprintf("not applied: %s came too late (the call is %s)", what, st.State), true
}

// resend shows again the held requests whose decision made here left the
// call pending for longer than NotAppliedAfter: the orchestrator did not
// apply it (a replica handed it over until it was dead-lettered), and the
// approver may decide again.
func (in *Inbox) resend(statuses map[approver.CallRef]wire.ApprovalStatus, now time.Time) {
	for _, d := range in.store.unsend(func(e *entry) (string, bool) {
		st, ok := statuses[approver.Ref(e.req)]
		if !ok || !st.Pending() || now.Sub(e.sent.at) < in.cfg.NotAppliedAfter {
			return "", false
		}
		return fmt.Sprintf("Your %s sent at %s was not applied: the call still waits for a decision. Decide again.",
			verb(e.sent.d), e.sent.at.UTC().Format("15:04:05 MST")), true
	}) {
		in.decided.forget(keyOf(d.RunID, d.ToolCallID))
		in.cfg.Metrics.Handled(in.cfg.ID, "not_applied")
		in.log.Warn("decision not applied: the request is shown again", slog.String("run_id", d.RunID),
			slog.String("tool_call_id", d.ToolCallID), slog.Duration("waited", now.Sub(d.DecidedAt)))
	}
}

func verb(d wire.Decision) string {
	if d.Approved {
		return "approval"
	}
	return "denial"
}
