package conversation

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/wire"
)

// Every transition that returns effects, from the states it is offered in:
// the effects its record asks for, in order, and what they name.
func TestTransitionEffects(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0.Add(time.Minute)
	const me = "orch-a"
	ttl := 30 * time.Second
	hist := []agent.Message{{Kind: agent.KindRequest}}

	running := func() *State {
		return New("c1", RunRecord{RunID: "r1_c1", Status: StatusRunning, Prompt: "p", StartedAt: t0},
			&Lease{Owner: me, RunID: "r1_c1", Until: now.Add(ttl)}, t0)
	}
	// paused has an approval (a) and an external call (b), replied as
	// replied says, due at deadline.
	paused := func(deadline time.Time, replied ...bool) *State {
		c := running()
		b := &Batch{RunID: "r1_c1"}
		for i, r := range replied {
			pc := &PendingCall{ToolCallID: string(rune('a' + i)), ToolName: "t", Kind: deferred.KindCall, Deadline: deadline}
			if i == 0 {
				pc.Kind = deferred.KindApproval
			}
			if r {
				pc.Reply = &Reply{Outcome: OutcomeReturn, At: t0}
			}
			b.Calls = append(b.Calls, pc)
		}
		if err := c.Pause(me, "r1_c1", hist, b, t0); err != nil {
			t.Fatal(err)
		}
		return c
	}
	expiredLease := func(c *State) *State { c.Lease.Until = t0; return c }
	completed := func() *State {
		c := running()
		if err := c.Complete(me, "r1_c1", hist, "out", t0); err != nil {
			t.Fatal(err)
		}
		return c
	}
	escalating := func() *State {
		c := paused(now.Add(time.Hour), false, true)
		c.Batch.Calls[0].Escalation = &Escalation{At: t0}
		return c
	}
	cl := Claimer{Owner: me, NewRunID: func(c *State) string { return "rr2_" + c.ID }, TTL: func(*State) time.Duration { return ttl }}
	notMine := Claimer{Owner: me, NewRunID: func(c *State) string { return "rr2_" + c.ID }, TTL: func(*State) time.Duration { return 0 }}
	yes := func(*State) bool { return true }
	no := func(*State) bool { return false }
	unserved := func(since time.Time) *State {
		c := expiredLease(running())
		c.Agent, c.Unserved, c.UnservedSince = "other", "no replica runs agent \"other\"", since
		return c
	}

	tests := []struct {
		name string
		from func() *State
		t    Transition
		// want are the effects' kinds, each with what it names
		// (effectString).
		want    []string
		wantErr error
		status  Status
	}{
		{
			name: "cancel running", from: running, t: CancelTransition(CancelledMessage),
			want: []string{"notifyCancel r1_c1", "withdraw detached", "log conversation cancelled",
				"emit r1_c1 conversation_cancelled"},
			status: StatusCancelled,
		},
		{
			name: "cancel paused settles and withdraws its calls",
			from: func() *State { return paused(now.Add(time.Hour), false, false) },
			t:    CancelTransition(CancelledMessage),
			want: []string{"notifyCancel r1_c1", "withdraw r1_c1 a,b detached", "log conversation cancelled",
				"emit r1_c1 conversation_cancelled"},
			status: StatusCancelled,
		},
		{
			name: "cancel finished is refused", from: completed, t: CancelTransition(CancelledMessage),
			wantErr: &ConflictError{}, status: StatusCompleted,
		},
		{
			name:   "expire past deadline, batch complete: claimed",
			from:   func() *State { return paused(t0, true, false) },
			t:      ExpireTransition(),
			want:   []string{"expired b", "emit r1_c1 calls_expired", "withdraw r1_c1 b", "batchDone r1_c1", "claim"},
			status: StatusPaused,
		},
		{
			name: "expire past deadline, batch incomplete: scheduled",
			from: func() *State {
				c := paused(now.Add(time.Hour), false, false)
				c.Batch.Calls[1].Deadline = t0
				return c
			},
			t:      ExpireTransition(),
			want:   []string{"expired b", "emit r1_c1 calls_expired", "withdraw r1_c1 b", "schedule"},
			status: StatusPaused,
		},
		{
			name: "expire nothing due: unchanged, still scheduled",
			from: func() *State { return paused(now.Add(time.Hour), false, false) },
			t:    ExpireTransition(), want: []string{"schedule"}, wantErr: ErrUnchanged, status: StatusPaused,
		},
		{
			name: "expire nothing due, batch complete: unchanged, claimed",
			from: func() *State { return paused(now.Add(time.Hour), true, true) },
			t:    ExpireTransition(), want: []string{"batchDone r1_c1", "claim"}, wantErr: ErrUnchanged, status: StatusPaused,
		},
		{
			name: "expire escalates an approval past its escalation time",
			from: escalating, t: ExpireTransition(),
			want: []string{"escalate r1_c1 a", "schedule"}, status: StatusPaused,
		},
		{
			name: "expire with no batch", from: running, t: ExpireTransition(),
			wantErr: ErrUnchanged, status: StatusRunning,
		},
		{
			name: "claim complete batch", from: func() *State { return paused(now.Add(time.Hour), true, true) },
			t: ClaimTransition(cl), want: []string{"followUp rr2_c1"}, status: StatusResuming,
		},
		{
			name: "claim complete batch of another agent: claimed all the same, lease expired",
			from: func() *State { return paused(now.Add(time.Hour), true, true) },
			t:    ClaimTransition(notMine), want: []string{"followUp rr2_c1"}, status: StatusResuming,
		},
		{
			name: "claim incomplete batch", from: func() *State { return paused(now.Add(time.Hour), true, false) },
			t: ClaimTransition(cl), wantErr: ErrUnchanged, status: StatusPaused,
		},
		{
			name: "take over expired lease", from: func() *State { return expiredLease(running()) },
			t: TakeOverTransition(me, ttl, yes), want: []string{"relaunch r1_c1"}, status: StatusRunning,
		},
		{
			name: "take over another agent's run: left to its replicas", from: func() *State { return expiredLease(running()) },
			t: TakeOverTransition(me, ttl, no), wantErr: ErrUnchanged, status: StatusRunning,
		},
		{
			name: "take over a live lease", from: running,
			t: TakeOverTransition(me, ttl, yes), wantErr: ErrUnchanged, status: StatusRunning,
		},
		{
			name: "take over with no running run recorded fails it",
			from: func() *State {
				c := expiredLease(running())
				c.Lease, c.Runs[0].Status = nil, StatusFailed
				return c
			},
			t: TakeOverTransition(me, ttl, yes), status: StatusFailed,
		},
		{
			name: "abort running", from: running, t: AbortTransition("too large"),
			want: []string{"log conversation failed: state too large", "emit r1_c1 run_failed"}, status: StatusFailed,
		},
		{
			name: "abort paused names the batch's run",
			from: func() *State { return paused(now.Add(time.Hour), false) },
			t:    AbortTransition("too large"),
			want: []string{"log conversation failed: state too large", "emit r1_c1 run_failed"}, status: StatusFailed,
		},
		{
			name: "abort finished", from: completed, t: AbortTransition("too large"),
			wantErr: ErrUnchanged, status: StatusCompleted,
		},
		{
			name: "wait for agent: noted", from: func() *State { return expiredLease(running()) },
			t:      WaitForAgentTransition("no replica", time.Minute),
			want:   []string{"log conversation waits for a replica of its agent", "emit r1_c1 agent_unavailable"},
			status: StatusRunning,
		},
		{
			name: "wait for agent: waited long enough, failed", from: func() *State { return unserved(now.Add(-time.Hour)) },
			t:      WaitForAgentTransition("no replica", time.Minute),
			want:   []string{"log conversation failed: no replica of its agent came", "emit r1_c1 run_failed"},
			status: StatusFailed,
		},
		{
			name: "wait for agent: still waiting", from: func() *State { return unserved(now) },
			t: WaitForAgentTransition("no replica", time.Minute), wantErr: ErrUnchanged, status: StatusRunning,
		},
		{name: "renew", from: running, t: RenewTransition(me, "r1_c1", ttl), status: StatusRunning},
		{
			name: "renew a lease lost", from: running, t: RenewTransition("orch-b", "r1_c1", ttl),
			wantErr: ErrLeaseLost, status: StatusRunning,
		},
		{name: "release", from: running, t: ReleaseTransition(me, "r1_c1"), status: StatusRunning},
		{
			name: "release another's", from: running, t: ReleaseTransition("orch-b", "r1_c1"),
			wantErr: ErrUnchanged, status: StatusRunning,
		},
		{
			name: "mark published", from: func() *State { return paused(now.Add(time.Hour), false, false) },
			t: MarkPublishedTransition("r1_c1", []string{"a"}, now), status: StatusPaused,
		},
		{
			name: "mark another run's calls", from: func() *State { return paused(now.Add(time.Hour), false, false) },
			t: MarkPublishedTransition("r0_c1", []string{"a"}, now), wantErr: ErrUnchanged, status: StatusPaused,
		},
		{
			name: "wait for agent: lease live", from: running,
			t: WaitForAgentTransition("no replica", time.Minute), wantErr: ErrUnchanged, status: StatusRunning,
		},
		{
			name: "delete completed: purged", from: completed, t: DeleteTransition(),
			want: []string{"purge", "log conversation deleted"}, status: StatusDeleted,
		},
		{
			name: "delete cancelled while paused withdraws the calls the cancel settled",
			from: func() *State {
				c := paused(now.Add(time.Hour), true, false, false)
				if _, err := c.Cancel(CancelledMessage, t0); err != nil {
					t.Fatal(err)
				}
				return c
			},
			t:      DeleteTransition(),
			want:   []string{"withdraw r1_c1 b,c", "purge", "log conversation deleted"},
			status: StatusDeleted,
		},
		{
			name: "delete withdraws the calls expired, not those answered",
			from: func() *State {
				c := paused(now.Add(time.Hour), true, true, false)
				c.Batch.Calls[2].Reply = &Reply{Outcome: OutcomeFailed, Expired: true, At: t0}
				c.Status, c.Lease = StatusFailed, nil
				return c
			},
			t:      DeleteTransition(),
			want:   []string{"withdraw r1_c1 c", "purge", "log conversation deleted"},
			status: StatusDeleted,
		},
		{
			name: "delete a batch every worker answered: nothing to withdraw",
			from: func() *State {
				c := paused(now.Add(time.Hour), true, true)
				c.Status, c.Lease = StatusCompleted, nil
				return c
			},
			t: DeleteTransition(), want: []string{"purge", "log conversation deleted"}, status: StatusDeleted,
		},
		{
			name: "delete running is refused", from: running, t: DeleteTransition(),
			wantErr: &ConflictError{}, status: StatusRunning,
		},
		{
			name: "delete paused is refused", from: func() *State { return paused(now.Add(time.Hour), false) },
			t: DeleteTransition(), wantErr: &ConflictError{}, status: StatusPaused,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := tt.from()
			effects, err := tt.t(c, now)
			switch want := tt.wantErr.(type) {
			case nil:
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
			case *ConflictError:
				var ce *ConflictError
				if !errors.As(err, &ce) {
					t.Fatalf("err = %v, want a *ConflictError", err)
				}
			default:
				if !errors.Is(err, want) {
					t.Fatalf("err = %v, want %v", err, want)
				}
			}
			got := make([]string, len(effects))
			for i, ef := range effects {
				got[i] = effectString(ef)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("effects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if c.Status != tt.status {
				t.Errorf("status = %s, want %s", c.Status, tt.status)
			}
		})
	}
}

// effectString is what a test compares of ef: its kind and what it names.
func effectString(ef Effect) string {
	parts := []string{ef.Kind.String()}
	switch ef.Kind {
	case EffectNotifyCancel:
		parts = append(parts, strings.Join(ef.Runs, ","))
	case EffectWithdraw, EffectExpired, EffectEscalate:
		ids := make([]string, len(ef.Calls))
		for i, pc := range ef.Calls {
			ids[i] = pc.ToolCallID
		}
		if ef.Kind != EffectExpired {
			parts = append(parts, ef.RunID)
		}
		parts = append(parts, strings.Join(ids, ","))
		if ef.Detached {
			parts = append(parts, "detached")
		}
	case EffectEmit:
		parts = append(parts, ef.RunID, ef.Event)
	case EffectLog:
		parts = append(parts, ef.Msg)
	case EffectBatchDone, EffectFollowUp, EffectRelaunch, EffectAudit, EffectPublishPaused:
		parts = append(parts, ef.RunID)
	}
	return strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), " ")
}

// The data of the events transitions emit are the wire's, with what they
// say: which calls a cancel settled, how many expired, when a wait fails.
func TestTransitionEventData(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := New("c1", RunRecord{RunID: "r1_c1", Status: StatusRunning, StartedAt: t0}, &Lease{Owner: "me", RunID: "r1_c1", Until: t0.Add(time.Minute)}, t0)
	if err := c.Pause("me", "r1_c1", nil, &Batch{RunID: "r1_c1", Calls: []*PendingCall{
		{ToolCallID: "a", Kind: deferred.KindCall, Deadline: t0},
		{ToolCallID: "b", Kind: deferred.KindCall, Deadline: t0.Add(time.Hour)},
	}}, t0); err != nil {
		t.Fatal(err)
	}
	expire, err := ExpireTransition()(c.Clone(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := expire[1].Data.(wire.CallsExpired); !ok || d.Calls != 1 || len(d.ToolCallIDs) != 1 || d.ToolCallIDs[0] != "a" {
		t.Errorf("calls_expired data = %#v", expire[1].Data)
	}
	cancel, err := CancelTransition(CancelledMessage)(c.Clone(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := cancel[3].Data.(wire.ConversationCancelled); !ok || d.Reason != CancelledMessage || strings.Join(d.ToolCallIDs, ",") != "a,b" {
		t.Errorf("conversation_cancelled data = %#v", cancel[3].Data)
	}
	c.Status, c.Lease = StatusRunning, &Lease{Owner: "me", RunID: "r1_c1", Until: t0}
	c.Agent = "other"
	wait, err := WaitForAgentTransition("none", time.Minute)(c, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := wait[1].Data.(wire.AgentUnavailable); !ok || d.Agent != "other" || !d.FailsAt.Equal(t0.Add(time.Second+time.Minute)) {
		t.Errorf("agent_unavailable data = %#v", wait[1].Data)
	}
}

// What the record that ends a run asks for, by how the run ended.
func TestEndedEffects(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const me = "orch-a"
	running := func() *State {
		return New("c1", RunRecord{RunID: "r1_c1", Status: StatusRunning, StartedAt: t0},
			&Lease{Owner: me, RunID: "r1_c1", Until: t0.Add(time.Minute)}, t0)
	}
	paused := func(calls ...*PendingCall) func() *State {
		return func() *State {
			c := running()
			if err := c.Pause(me, "r1_c1", nil, &Batch{RunID: "r1_c1", Calls: calls}, t0); err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	call := func(id string, kind deferred.Kind, replied bool) *PendingCall {
		pc := &PendingCall{ToolCallID: id, Kind: kind, Deadline: t0.Add(time.Hour)}
		if replied {
			pc.Reply = &Reply{Outcome: OutcomeReturn, At: t0}
		}
		return pc
	}
	grant := []GrantUse{{CallID: "a", Tool: "t"}}
	tests := []struct {
		name    string
		from    func() *State
		granted []GrantUse
		want    []string
	}{
		{
			name: "completed",
			from: func() *State {
				c := running()
				if err := c.Complete(me, "r1_c1", nil, "out", t0); err != nil {
					t.Fatal(err)
				}
				return c
			},
			want: []string{"endWritten", "log run completed", "emit r1_c1 run_completed", "runEnded"},
		},
		{
			name: "failed",
			from: func() *State {
				c := running()
				if err := c.Fail(me, "r1_c1", "boom", t0); err != nil {
					t.Fatal(err)
				}
				return c
			},
			want: []string{"endWritten", "log run failed", "emit r1_c1 run_failed", "runEnded"},
		},
		{
			name: "paused on external calls",
			from: paused(call("b", deferred.KindCall, false)),
			want: []string{"log run paused", "emit r1_c1 run_paused", "awaitReplies", "schedule", "publishPaused r1_c1"},
		},
		{
			name: "paused on an approval: indexed at once",
			from: paused(call("a", deferred.KindApproval, false), call("b", deferred.KindCall, false)),
			want: []string{"log run paused", "index", "emit r1_c1 run_paused", "schedule", "publishPaused r1_c1"},
		},
		{
			name:    "paused, every call answered inline or granted: claimed",
			from:    paused(call("a", deferred.KindApproval, true), call("b", deferred.KindCall, true)),
			granted: grant,
			want: []string{"audit r1_c1", "log run paused", "emit r1_c1 run_paused", "awaitReplies",
				"batchDone r1_c1", "claim", "publishPaused r1_c1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			effects := EndedEffects(tt.from(), "r1_c1", tt.granted)
			got := make([]string, len(effects))
			for i, ef := range effects {
				got[i] = effectString(ef)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("effects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			// Made at their number, not grown one by one.
			if cap(effects) != len(effects) {
				t.Errorf("%d effects in an array of %d", len(effects), cap(effects))
			}
		})
	}
}

// What a start's record and an inline wait's record ask for.
func TestStartAndInlineEffects(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		effects []Effect
		want    []string
	}{
		{"start here", StartedEffects("r1_c1", true), []string{"started", "launch"}},
		{"start of another agent", StartedEffects("r1_c1", false), []string{"started", "handOver"}},
		{"inline", InlineEffects("r1_c1", nil), []string{"schedule", "publishInline"}},
		{"inline granted", InlineEffects("r1_c1", []GrantUse{{CallID: "a"}}), []string{"audit r1_c1", "schedule", "publishInline"}},
	} {
		got := make([]string, len(tt.effects))
		for i, ef := range tt.effects {
			got[i] = effectString(ef)
		}
		if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
			t.Errorf("%s: effects:\n%s\nwant:\n%s", tt.name, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
	}
	if ef := StartedEffects("r1_c1", true)[1]; ef.RunID != "r1_c1" {
		t.Errorf("launch names run %q, want r1_c1", ef.RunID)
	}
}

// What the record of a group of replies asks for: their answers, then the
// follow-up it claimed, or the next deadline and the calls it dispatched.
func TestRepliedEffects(t *testing.T) {
	t.Parallel()
	c := &State{ID: "c1", Status: StatusPaused, Batch: &Batch{RunID: "r1_c1"}}
	for _, tt := range []struct {
		name       string
		dispatched []string
		followUp   string
		want       []string
	}{
		{"claimed", []string{"b"}, "r2_c1", []string{"replied", "batchDone r1_c1", "followUp r2_c1"}},
		{"incomplete", nil, "", []string{"replied", "schedule"}},
		{"dispatched", []string{"b"}, "", []string{"replied", "schedule", "publishDispatched"}},
	} {
		effects := RepliedEffects(c, tt.dispatched, tt.followUp)
		got := make([]string, len(effects))
		for i, ef := range effects {
			got[i] = effectString(ef)
		}
		if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
			t.Errorf("%s: effects:\n%s\nwant:\n%s", tt.name, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
		if last := effects[len(effects)-1]; last.Kind == EffectPublishDispatched && strings.Join(last.CallIDs, ",") != "b" {
			t.Errorf("%s: dispatched %v, want [b]", tt.name, last.CallIDs)
		}
	}
}
