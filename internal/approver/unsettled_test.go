package approver_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

// statusDesk answers approval status requests as an orchestrator would,
// from states the test sets (pending unless set), and never publishes a
// decision's outcome: as when the replica that read a decision handed it
// over.
type statusDesk struct {
	mu     sync.Mutex
	states map[string]wire.ApprovalStatus
}

func newStatusDesk(t *testing.T, b *bus.Bus) *statusDesk {
	t.Helper()
	s := &statusDesk{states: map[string]wire.ApprovalStatus{}}
	sub, err := b.Conn().Subscribe(wire.SubjectApprovalStatus, func(m *nats.Msg) {
		var q wire.ApprovalStatusRequest
		if err := json.Unmarshal(m.Data, &q); err != nil {
			return
		}
		rep := wire.ApprovalStatusReply{Calls: []wire.ApprovalStatus{}}
		s.mu.Lock()
		for _, c := range q.Calls {
			st, ok := s.states[c.RunID+"/"+c.ToolCallID]
			if !ok {
				st = wire.ApprovalStatus{State: wire.StatePending}
			}
			st.RunID, st.ToolCallID = c.RunID, c.ToolCallID
			rep.Calls = append(rep.Calls, st)
		}
		s.mu.Unlock()
		data, _ := json.Marshal(rep)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *statusDesk) set(key, state, by string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.states[key] = wire.ApprovalStatus{State: state, By: by}
}

// A bot's decisions whose outcome does not come are followed up by the
// calls' status: one still pending long after (handed over until
// dead-lettered) and one another approver's decision beat are reported as
// not applied; one applied is not. Before, each counted as made and
// nothing more was heard of it.
func TestApproverLearnsADecisionWasNotApplied(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	desk := newStatusDesk(t, b)
	pol, err := approver.ParsePolicy([]byte("rules:\n  - action: approve\n"))
	if err != nil {
		t.Fatal(err)
	}
	refusals := make(chan *approver.RefusedError, 8)
	events := runApprover(t, approver.Config{Bus: b, ID: "bot", Policy: pol,
		OutcomeTimeout: 200 * time.Millisecond, StatusInterval: 100 * time.Millisecond, NotAppliedAfter: time.Second,
		RefusedFunc: func(_ wire.ApprovalRequest, err *approver.RefusedError) { refusals <- err }})

	publish(t, b, approvalRequest(t, "run-lost", "c1", "x", `{}`), approvalRequest(t, "run-beaten", "c2", "x", `{}`),
		approvalRequest(t, "run-applied", "c3", "x", `{}`))
	for range 3 {
		if h := next(t, events); h.outcome != approver.OutcomeApproved {
			t.Fatalf("%s: %s, want approved (sent, outcome unknown)", h.req.RunID, h.outcome)
		}
	}
	desk.set("run-beaten/c2", wire.StateDecided, "ann")
	desk.set("run-applied/c3", wire.StateDecided, "bot")
	got := map[string]*approver.RefusedError{}
	for range 2 {
		r := bustest.Recv(t, refusals, "a decision reported not applied")
		got[r.RunID] = r
	}
	if r := got["run-beaten"]; r == nil || r.Verdict != wire.StateDecided || !strings.Contains(r.Reason, "decided by ann") {
		t.Errorf("beaten: %+v", r)
	}
	if r := got["run-lost"]; r == nil || r.Verdict != wire.StatePending || !strings.Contains(r.Reason, "still waits") {
		t.Errorf("lost: %+v", r)
	}
	// The applied one was settled in the pass that reported the beaten
	// one, before the lost one's time: had it been reported, it would
	// have come before the lost one.
	select {
	case r := <-refusals:
		t.Errorf("also reported: %+v", r)
	default:
	}
}
