package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
)

// ErrNotPending is returned by Decide for a request the inbox does not hold
// (never seen, already decided, expired or settled elsewhere).
var ErrNotPending = errors.New("not pending")

// Decide publishes a human's decision on a held request and lets the
// request go. Edited args the tool's schema refuses are an
// *approver.ArgsError, and nothing is sent.
func (in *Inbox) Decide(ctx context.Context, runID, toolCallID string, c approver.Choice) (bus.Decision, error) {
	key := keyOf(runID, toolCallID)
	e, ok := in.store.get(key)
	if !ok {
		if r := in.store.reason(key); r != "" {
			return bus.Decision{}, fmt.Errorf("decide %s: %w (%s)", key, ErrNotPending, r)
		}
		return bus.Decision{}, fmt.Errorf("decide %s: %w", key, ErrNotPending)
	}
	d, err := approver.NewDecision(e.req, in.cfg.ID, c, in.cfg.Key, in.cfg.Clock())
	if err != nil {
		return bus.Decision{}, err
	}
	if !e.req.Deadline.IsZero() && !d.DecidedAt.Before(e.req.Deadline) {
		return bus.Decision{}, fmt.Errorf("decide %s: %w (expired)", key, ErrNotPending)
	}
	if _, err := in.cfg.Bus.PublishDecision(ctx, d); err != nil {
		return bus.Decision{}, fmt.Errorf("decide %s: %w", key, err)
	}
	in.decided.add(d)
	outcome := "denied"
	if d.Approved {
		outcome = "approved"
	}
	if e, ok := in.store.remove(key, outcome+" here"); ok {
		_ = e.msg.Ack()
	}
	in.cfg.Metrics.Handled(in.cfg.ID, outcome)
	in.cfg.Metrics.Decided(in.cfg.ID, outcome, d.DecidedAt.Sub(e.received))
	in.log.InfoContext(ctx, "decision published", slog.String("run_id", runID), slog.String("tool_call_id", toolCallID),
		slog.String("outcome", outcome), slog.Bool("override_args", len(d.OverrideArgs) != 0),
		slog.Bool("signed", d.Signature != nil))
	return d, nil
}

// Pending lists the held requests, oldest first.
func (in *Inbox) Pending() []Item {
	items, _ := in.store.snapshot()
	return items
}
