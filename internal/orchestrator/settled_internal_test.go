package orchestrator

import (
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/wire"
)

// Where an approval stands, as approvers are told: pending only while its
// run waits for it, before its deadline.
func TestApprovalState(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	conv := func(status conversation.Status, reply *conversation.Reply, deadline time.Time) *conversation.State {
		return &conversation.State{Status: status, Batch: &conversation.Batch{RunID: "r1", Calls: []*conversation.PendingCall{
			{ToolCallID: "c1", Kind: deferred.KindApproval, Deadline: deadline, Reply: reply},
			{ToolCallID: "x1", Kind: deferred.KindCall, Deadline: deadline},
		}}}
	}
	later := now.Add(time.Minute)
	tests := []struct {
		name string
		c    *conversation.State
		ref  wire.CallRef
		want string
	}{
		{"waiting", conv(conversation.StatusPaused, nil, later), wire.CallRef{RunID: "r1", ToolCallID: "c1"}, wire.StatePending},
		{"no deadline", conv(conversation.StatusPaused, nil, time.Time{}), wire.CallRef{RunID: "r1", ToolCallID: "c1"}, wire.StatePending},
		{"deadline passed, not yet settled", conv(conversation.StatusPaused, nil, now), wire.CallRef{RunID: "r1", ToolCallID: "c1"}, wire.StateExpired},
		{"decided", conv(conversation.StatusPaused, &conversation.Reply{Outcome: "approved", By: "alice"}, later), wire.CallRef{RunID: "r1", ToolCallID: "c1"}, wire.StateDecided},
		{"expired", conv(conversation.StatusPaused, &conversation.Reply{Outcome: "denied", Expired: true}, later), wire.CallRef{RunID: "r1", ToolCallID: "c1"}, wire.StateExpired},
		{"cancelled", conv(conversation.StatusCancelled, &conversation.Reply{Outcome: "denied", Cancelled: true}, later), wire.CallRef{RunID: "r1", ToolCallID: "c1"}, wire.StateCancelled},
		{"cancelled, no reply", conv(conversation.StatusCancelled, nil, later), wire.CallRef{RunID: "r1", ToolCallID: "c1"}, wire.StateCancelled},
		{"run failed", conv(conversation.StatusFailed, nil, later), wire.CallRef{RunID: "r1", ToolCallID: "c1"}, wire.StateOver},
		{"another run's batch", conv(conversation.StatusPaused, nil, later), wire.CallRef{RunID: "r0", ToolCallID: "c1"}, wire.StateOver},
		{"a call, not an approval", conv(conversation.StatusPaused, nil, later), wire.CallRef{RunID: "r1", ToolCallID: "x1"}, wire.StateOver},
		{"no batch", &conversation.State{Status: conversation.StatusCompleted}, wire.CallRef{RunID: "r1", ToolCallID: "c1"}, wire.StateOver},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := approvalState(tt.c, tt.ref, now); got != tt.want {
				t.Errorf("approvalState = %s, want %s", got, tt.want)
			}
		})
	}
}
