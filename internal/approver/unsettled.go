package approver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// unsettled are the decisions published whose outcome did not come in
// time (ErrNoOutcome): the approver asks their calls' status until it
// knows whether each was applied. A replica that does not hold a
// conversation's config hands its decisions over, and one that no holding
// replica takes is dead-lettered, never applied: its call stays pending.
type unsettled struct {
	mu    sync.Mutex
	calls map[CallRef]sentDecision
}

type sentDecision struct {
	req wire.ApprovalRequest
	d   wire.Decision
	at  time.Time
}

func (u *unsettled) add(req wire.ApprovalRequest, d wire.Decision, at time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.calls == nil {
		u.calls = map[CallRef]sentDecision{}
	}
	u.calls[Ref(req)] = sentDecision{req: req, d: d, at: at}
}

func (u *unsettled) snapshot() []sentDecision {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Collect(maps.Values(u.calls))
}

func (u *unsettled) drop(ref CallRef) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.calls, ref)
}

// followUnsettled asks, every StatusInterval until ctx ends, what became
// of the decisions whose outcome did not come.
func (a *Approver) followUnsettled(ctx context.Context) {
	t := time.NewTicker(a.cfg.StatusInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.checkUnsettled(ctx)
	}
}

// checkUnsettled settles what the calls' status tells: a call decided by
// this approver had its decision applied; one decided by another, or no
// longer waiting, did not; one still pending NotAppliedAfter after the
// decision did not either (it was handed over until dead-lettered). A
// decision not applied is reported as a refusal (RefusedFunc, the Teller)
// whose verdict is the call's state.
func (a *Approver) checkUnsettled(ctx context.Context) {
	sent := a.unsettled.snapshot()
	if len(sent) == 0 {
		return
	}
	reqs := make([]wire.ApprovalRequest, len(sent))
	for i, s := range sent {
		reqs[i] = s.req
	}
	statuses, err := Statuses(ctx, a.cfg.Bus, reqs)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrNoOrchestrator) {
			a.logger.WarnContext(ctx, "ask what became of decisions without an outcome", slog.Any("error", err))
		}
		return
	}
	now := a.cfg.Clock()
	for _, s := range sent {
		st, ok := statuses[Ref(s.req)]
		if !ok {
			continue
		}
		log := a.logger.With(slog.String("run_id", s.req.RunID), slog.String("tool_call_id", s.req.ToolCallID))
		var reason string
		switch {
		case st.State == wire.StateDecided && st.By == a.cfg.ID:
			a.unsettled.drop(Ref(s.req))
			log.InfoContext(ctx, "decision applied")
			continue
		case st.Pending() && now.Sub(s.at) < a.cfg.NotAppliedAfter:
			continue
		case st.Pending():
			reason = fmt.Sprintf("not applied: the call still waits for a decision %s after this one was sent", now.Sub(s.at).Round(time.Second))
		case st.By != "":
			reason = "not applied: the call was decided by " + st.By
		default:
			reason = "not applied: the call is " + st.State
		}
		a.unsettled.drop(Ref(s.req))
		refused := &RefusedError{RunID: s.req.RunID, ToolCallID: s.req.ToolCallID, Verdict: st.State, Reason: reason}
		log.WarnContext(ctx, "decision not applied", slog.String("state", st.State), slog.String("by", st.By),
			slog.Bool("approved", s.d.Approved))
		a.cfg.Metrics.Handled(a.cfg.ID, "not_applied")
		a.tell(refused.Error())
		a.refused(s.req, refused)
	}
}
