package orchestrator

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

	running := func() *Conversation {
		return NewConversation("c1", RunRecord{RunID: "r1_c1", Status: StatusRunning, Prompt: "p", StartedAt: t0},
			&Lease{Owner: me, RunID: "r1_c1", Until: now.Add(ttl)}, t0)
	}
	// paused has an approval (a) and an external call (b), replied as
	// replied says, due at deadline.
	paused := func(deadline time.Time, replied ...bool) *Conversation {
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
	expiredLease := func(c *Conversation) *Conversation { c.Lease.Until = t0; return c }
	completed := func() *Conversation {
		c := running()
		if err := c.Complete(me, "r1_c1", hist, "out", t0); err != nil {
			t.Fatal(err)
		}
		return c
	}
	escalating := func() *Conversation {
		c := paused(now.Add(time.Hour), false, true)
		c.Batch.Calls[0].Escalation = &Escalation{At: t0}
		return c
	}
	cl := claimer{owner: me, newID: func() string { return "r2" }, ttl: func(*Conversation) time.Duration { return ttl }}
	notMine := claimer{owner: me, newID: func() string { return "r2" }, ttl: func(*Conversation) time.Duration { return 0 }}
	yes := func(*Conversation) bool { return true }
	no := func(*Conversation) bool { return false }
	unserved := func(since time.Time) *Conversation {
		c := expiredLease(running())
		c.Agent, c.Unserved, c.UnservedSince = "other", "no replica runs agent \"other\"", since
		return c
	}

	tests := []struct {
		name string
		from func() *Conversation
		t    transition
		// want are the effects' kinds, each with what it names
		// (effectString).
		want    []string
		wantErr error
		status  Status
	}{
		{
			name: "cancel running", from: running, t: cancelTransition(CancelledMessage),
			want: []string{"notifyCancel r1_c1", "withdraw detached", "log conversation cancelled",
				"emit r1_c1 conversation_cancelled"},
			status: StatusCancelled,
		},
		{
			name: "cancel paused settles and withdraws its calls",
			from: func() *Conversation { return paused(now.Add(time.Hour), false, false) },
			t:    cancelTransition(CancelledMessage),
			want: []string{"notifyCancel r1_c1", "withdraw r1_c1 a,b detached", "log conversation cancelled",
				"emit r1_c1 conversation_cancelled"},
			status: StatusCancelled,
		},
		{
			name: "cancel finished is refused", from: completed, t: cancelTransition(CancelledMessage),
			wantErr: &ConflictError{}, status: StatusCompleted,
		},
		{
			name:   "expire past deadline, batch complete: claimed",
			from:   func() *Conversation { return paused(t0, true, false) },
			t:      expireTransition(),
			want:   []string{"expired b", "emit r1_c1 calls_expired", "withdraw r1_c1 b", "batchDone r1_c1", "claim"},
			status: StatusPaused,
		},
		{
			name: "expire past deadline, batch incomplete: scheduled",
			from: func() *Conversation {
				c := paused(now.Add(time.Hour), false, false)
				c.Batch.Calls[1].Deadline = t0
				return c
			},
			t:      expireTransition(),
			want:   []string{"expired b", "emit r1_c1 calls_expired", "withdraw r1_c1 b", "schedule"},
			status: StatusPaused,
		},
		{
			name: "expire nothing due: unchanged, still scheduled",
			from: func() *Conversation { return paused(now.Add(time.Hour), false, false) },
			t:    expireTransition(), want: []string{"schedule"}, wantErr: errUnchanged, status: StatusPaused,
		},
		{
			name: "expire nothing due, batch complete: unchanged, claimed",
			from: func() *Conversation { return paused(now.Add(time.Hour), true, true) },
			t:    expireTransition(), want: []string{"batchDone r1_c1", "claim"}, wantErr: errUnchanged, status: StatusPaused,
		},
		{
			name: "expire escalates an approval past its escalation time",
			from: escalating, t: expireTransition(),
			want: []string{"escalate r1_c1 a", "schedule"}, status: StatusPaused,
		},
		{
			name: "expire with no batch", from: running, t: expireTransition(),
			wantErr: errUnchanged, status: StatusRunning,
		},
		{
			name: "claim complete batch", from: func() *Conversation { return paused(now.Add(time.Hour), true, true) },
			t: claimTransition(cl), want: []string{"followUp rr2_c1"}, status: StatusResuming,
		},
		{
			name: "claim complete batch of another agent: claimed all the same, lease expired",
			from: func() *Conversation { return paused(now.Add(time.Hour), true, true) },
			t:    claimTransition(notMine), want: []string{"followUp rr2_c1"}, status: StatusResuming,
		},
		{
			name: "claim incomplete batch", from: func() *Conversation { return paused(now.Add(time.Hour), true, false) },
			t: claimTransition(cl), wantErr: errUnchanged, status: StatusPaused,
		},
		{
			name: "take over expired lease", from: func() *Conversation { return expiredLease(running()) },
			t: takeOverTransition(me, ttl, yes), want: []string{"relaunch r1_c1"}, status: StatusRunning,
		},
		{
			name: "take over another agent's run: left to its replicas", from: func() *Conversation { return expiredLease(running()) },
			t: takeOverTransition(me, ttl, no), wantErr: errUnchanged, status: StatusRunning,
		},
		{
			name: "take over a live lease", from: running,
			t: takeOverTransition(me, ttl, yes), wantErr: errUnchanged, status: StatusRunning,
		},
		{
			name: "take over with no running run recorded fails it",
			from: func() *Conversation {
				c := expiredLease(running())
				c.Lease, c.Runs[0].Status = nil, StatusFailed
				return c
			},
			t: takeOverTransition(me, ttl, yes), status: StatusFailed,
		},
		{
			name: "abort running", from: running, t: abortTransition("too large"),
			want: []string{"log conversation failed: state too large", "emit r1_c1 run_failed"}, status: StatusFailed,
		},
		{
			name: "abort paused names the batch's run",
			from: func() *Conversation { return paused(now.Add(time.Hour), false) },
			t:    abortTransition("too large"),
			want: []string{"log conversation failed: state too large", "emit r1_c1 run_failed"}, status: StatusFailed,
		},
		{
			name: "abort finished", from: completed, t: abortTransition("too large"),
			wantErr: errUnchanged, status: StatusCompleted,
		},
		{
			name: "wait for agent: noted", from: func() *Conversation { return expiredLease(running()) },
			t:      waitForAgentTransition("no replica", time.Minute),
			want:   []string{"log conversation waits for a replica of its agent", "emit r1_c1 agent_unavailable"},
			status: StatusRunning,
		},
		{
			name: "wait for agent: waited long enough, failed", from: func() *Conversation { return unserved(now.Add(-time.Hour)) },
			t:      waitForAgentTransition("no replica", time.Minute),
			want:   []string{"log conversation failed: no replica of its agent came", "emit r1_c1 run_failed"},
			status: StatusFailed,
		},
		{
			name: "wait for agent: still waiting", from: func() *Conversation { return unserved(now) },
			t: waitForAgentTransition("no replica", time.Minute), wantErr: errUnchanged, status: StatusRunning,
		},
		{name: "renew", from: running, t: renewTransition(me, "r1_c1", ttl), status: StatusRunning},
		{
			name: "renew a lease lost", from: running, t: renewTransition("orch-b", "r1_c1", ttl),
			wantErr: errLeaseLost, status: StatusRunning,
		},
		{name: "release", from: running, t: releaseTransition(me, "r1_c1"), status: StatusRunning},
		{
			name: "release another's", from: running, t: releaseTransition("orch-b", "r1_c1"),
			wantErr: errUnchanged, status: StatusRunning,
		},
		{
			name: "mark published", from: func() *Conversation { return paused(now.Add(time.Hour), false, false) },
			t: markPublishedTransition("r1_c1", []string{"a"}, now), status: StatusPaused,
		},
		{
			name: "mark another run's calls", from: func() *Conversation { return paused(now.Add(time.Hour), false, false) },
			t: markPublishedTransition("r0_c1", []string{"a"}, now), wantErr: errUnchanged, status: StatusPaused,
		},
		{
			name: "wait for agent: lease live", from: running,
			t: waitForAgentTransition("no replica", time.Minute), wantErr: errUnchanged, status: StatusRunning,
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
func effectString(ef effect) string {
	parts := []string{ef.kind.String()}
	switch ef.kind {
	case effectNotifyCancel:
		parts = append(parts, strings.Join(ef.runs, ","))
	case effectWithdraw, effectExpired, effectEscalate:
		ids := make([]string, len(ef.calls))
		for i, pc := range ef.calls {
			ids[i] = pc.ToolCallID
		}
		if ef.kind != effectExpired {
			parts = append(parts, ef.runID)
		}
		parts = append(parts, strings.Join(ids, ","))
		if ef.detached {
			parts = append(parts, "detached")
		}
	case effectEmit:
		parts = append(parts, ef.runID, ef.event)
	case effectLog:
		parts = append(parts, ef.msg)
	case effectBatchDone, effectFollowUp, effectRelaunch, effectAudit, effectPublishPaused:
		parts = append(parts, ef.runID)
	}
	return strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), " ")
}

// The data of the events transitions emit are the wire's, with what they
// say: which calls a cancel settled, how many expired, when a wait fails.
func TestTransitionEventData(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := NewConversation("c1", RunRecord{RunID: "r1_c1", Status: StatusRunning, StartedAt: t0}, &Lease{Owner: "me", RunID: "r1_c1", Until: t0.Add(time.Minute)}, t0)
	if err := c.Pause("me", "r1_c1", nil, &Batch{RunID: "r1_c1", Calls: []*PendingCall{
		{ToolCallID: "a", Kind: deferred.KindCall, Deadline: t0},
		{ToolCallID: "b", Kind: deferred.KindCall, Deadline: t0.Add(time.Hour)},
	}}, t0); err != nil {
		t.Fatal(err)
	}
	expire, err := expireTransition()(c.clone(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := expire[1].data.(wire.CallsExpired); !ok || d.Calls != 1 || len(d.ToolCallIDs) != 1 || d.ToolCallIDs[0] != "a" {
		t.Errorf("calls_expired data = %#v", expire[1].data)
	}
	cancel, err := cancelTransition(CancelledMessage)(c.clone(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := cancel[3].data.(wire.ConversationCancelled); !ok || d.Reason != CancelledMessage || strings.Join(d.ToolCallIDs, ",") != "a,b" {
		t.Errorf("conversation_cancelled data = %#v", cancel[3].data)
	}
	c.Status, c.Lease = StatusRunning, &Lease{Owner: "me", RunID: "r1_c1", Until: t0}
	c.Agent = "other"
	wait, err := waitForAgentTransition("none", time.Minute)(c, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := wait[1].data.(wire.AgentUnavailable); !ok || d.Agent != "other" || !d.FailsAt.Equal(t0.Add(time.Second+time.Minute)) {
		t.Errorf("agent_unavailable data = %#v", wait[1].data)
	}
}

// What the record that ends a run asks for, by how the run ended.
func TestEndedEffects(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const me = "orch-a"
	running := func() *Conversation {
		return NewConversation("c1", RunRecord{RunID: "r1_c1", Status: StatusRunning, StartedAt: t0},
			&Lease{Owner: me, RunID: "r1_c1", Until: t0.Add(time.Minute)}, t0)
	}
	paused := func(calls ...*PendingCall) func() *Conversation {
		return func() *Conversation {
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
	grant := []grantUse{{callID: "a", tool: "t"}}
	tests := []struct {
		name    string
		from    func() *Conversation
		granted []grantUse
		want    []string
	}{
		{
			name: "completed",
			from: func() *Conversation {
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
			from: func() *Conversation {
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
			effects := endedEffects(tt.from(), "r1_c1", tt.granted)
			got := make([]string, len(effects))
			for i, ef := range effects {
				got[i] = effectString(ef)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("effects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// What a start's record and an inline wait's record ask for.
func TestStartAndInlineEffects(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		effects []effect
		want    []string
	}{
		{"start here", startedEffects("r1_c1", true), []string{"started", "launch"}},
		{"start of another agent", startedEffects("r1_c1", false), []string{"started", "handOver"}},
		{"inline", inlineEffects("r1_c1", nil), []string{"schedule", "publishInline"}},
		{"inline granted", inlineEffects("r1_c1", []grantUse{{callID: "a"}}), []string{"audit r1_c1", "schedule", "publishInline"}},
	} {
		got := make([]string, len(tt.effects))
		for i, ef := range tt.effects {
			got[i] = effectString(ef)
		}
		if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
			t.Errorf("%s: effects:\n%s\nwant:\n%s", tt.name, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
	}
	if ef := startedEffects("r1_c1", true)[1]; ef.runID != "r1_c1" {
		t.Errorf("launch names run %q, want r1_c1", ef.runID)
	}
}

// What the record of a group of replies asks for: their answers, then the
// follow-up it claimed, or the next deadline and the calls it dispatched.
func TestRepliedEffects(t *testing.T) {
	t.Parallel()
	c := &Conversation{ID: "c1", Status: StatusPaused, Batch: &Batch{RunID: "r1_c1"}}
	plain := &replyJob{in: incoming{callID: "a"}}
	sent := &replyJob{in: incoming{callID: "b"}, dispatched: &wire.PendingCall{}}
	for _, tt := range []struct {
		name     string
		jobs     []*replyJob
		followUp string
		want     []string
	}{
		{"claimed", []*replyJob{plain, sent}, "r2_c1", []string{"replied", "batchDone r1_c1", "followUp r2_c1"}},
		{"incomplete", []*replyJob{plain}, "", []string{"replied", "schedule"}},
		{"dispatched", []*replyJob{plain, sent}, "", []string{"replied", "schedule", "publishDispatched"}},
	} {
		effects := repliedEffects(c, tt.jobs, tt.followUp)
		got := make([]string, len(effects))
		for i, ef := range effects {
			got[i] = effectString(ef)
		}
		if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
			t.Errorf("%s: effects:\n%s\nwant:\n%s", tt.name, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
		}
		if last := effects[len(effects)-1]; last.kind == effectPublishDispatched && strings.Join(last.callIDs, ",") != "b" {
			t.Errorf("%s: dispatched %v, want [b]", tt.name, last.callIDs)
		}
	}
}
