package approver

import (
	"encoding/json"
	"sync"

	"github.com/toolgate/toolgate/wire"
)

// Settlement says how a call was settled elsewhere, as far as the events
// tell.
type Settlement struct {
	// Reason is "decided", "expired", "cancelled" or "over" (the run's
	// batch was taken by its follow-up, or the run ended).
	Reason string
	// Approved, ApproverID and Message are set when the reply_applied
	// event carries them.
	Approved   *bool
	ApproverID string
	Message    string
}

// Settlements follows conversation events and answers whether an approval
// request is still open. A request is settled once a reply for its call
// was applied, once its run's calls expired or the run ended, or once a
// later run of its conversation started (a follow-up starts only when its
// batch is complete). Safe for concurrent use.
type Settlements struct {
	mu    sync.Mutex
	calls map[callKey]Settlement
	runs  map[string]Settlement
	// started lists, per conversation, the runs started since the last
	// follow-up: a new run settles all of them.
	started map[string][]string
}

type callKey struct{ run, call string }

// NewSettlements returns an empty tracker.
func NewSettlements() *Settlements {
	return &Settlements{
		calls:   make(map[callKey]Settlement),
		runs:    make(map[string]Settlement),
		started: make(map[string][]string),
	}
}

// Observe records what ev settles and reports whether it settled anything.
func (s *Settlements) Observe(ev wire.Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch ev.Type {
	case wire.EventReplyApplied:
		if ev.RunID == "" || ev.ToolCallID == "" {
			return false
		}
		st := Settlement{Reason: "decided"}
		var data wire.ReplyApplied
		if json.Unmarshal(ev.Data, &data) == nil {
			st.Approved, st.ApproverID, st.Message = data.Approved, data.ApproverID, data.Message
		}
		s.calls[callKey{ev.RunID, ev.ToolCallID}] = st
		return true
	case wire.EventCallsExpired:
		if ev.RunID == "" {
			return false
		}
		s.runs[ev.RunID] = Settlement{Reason: "expired"}
		return true
	case wire.EventConversationCancelled:
		if ev.RunID == "" {
			return false
		}
		s.runs[ev.RunID] = Settlement{Reason: "cancelled"}
		return true
	case wire.EventRunCompleted, wire.EventRunFailed:
		if ev.RunID == "" {
			return false
		}
		if _, ok := s.runs[ev.RunID]; !ok {
			s.runs[ev.RunID] = Settlement{Reason: "over"}
		}
		return true
	case wire.EventRunStarted:
		if ev.RunID == "" || ev.ConversationID == "" {
			return false
		}
		changed := false
		for _, r := range s.started[ev.ConversationID] {
			if r == ev.RunID {
				continue
			}
			if _, ok := s.runs[r]; !ok {
				s.runs[r] = Settlement{Reason: "over"}
			}
			changed = true
		}
		s.started[ev.ConversationID] = []string{ev.RunID}
		return changed
	}
	return false
}

// Settled reports whether req was settled elsewhere, and how.
func (s *Settlements) Settled(req wire.ApprovalRequest) (Settlement, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.calls[callKey{req.RunID, req.ToolCallID}]; ok {
		return st, true
	}
	st, ok := s.runs[req.RunID]
	return st, ok
}
