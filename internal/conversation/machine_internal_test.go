package conversation

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/wire"
)

// Every transition of the state machine, from each state it is offered in:
// what it allows, what it refuses, and the state it leaves.
func TestTransitions(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := t0.Add(time.Minute)
	const me, other = "orch-a", "orch-b"
	ttl := 30 * time.Second
	hist := []agent.Message{{Kind: agent.KindRequest}}

	running := func() *State {
		return New("c1", RunRecord{RunID: "r1_c1", Status: StatusRunning, Prompt: "p", StartedAt: t0},
			&Lease{Owner: me, RunID: "r1_c1", Until: now.Add(ttl)}, t0)
	}
	batch := func(runID string, replied ...bool) *Batch {
		b := &Batch{RunID: runID}
		for i, r := range replied {
			pc := &PendingCall{ToolCallID: string(rune('a' + i)), ToolName: "t", Kind: deferred.KindCall, Deadline: now.Add(time.Hour)}
			if i == 0 {
				pc.Kind, pc.ArgsDigest = deferred.KindApproval, "d"
			}
			if r {
				pc.Reply = &Reply{Outcome: OutcomeReturn, At: t0}
			}
			b.Calls = append(b.Calls, pc)
		}
		return b
	}
	paused := func(replied ...bool) *State {
		c := running()
		if err := c.Pause(me, "r1_c1", hist, batch("r1_c1", replied...), t0); err != nil {
			t.Fatal(err)
		}
		return c
	}
	resuming := func() *State {
		c := paused(true, true)
		if !c.Claim(me, "r2_c1", now, ttl) {
			t.Fatal("claim")
		}
		return c
	}
	expiredLease := func(c *State) *State { c.Lease.Until = t0; return c }
	finished := func(s Status) func() *State {
		return func() *State {
			c := running()
			switch s {
			case StatusCompleted:
				_ = c.Complete(me, "r1_c1", hist, "out", t0)
			case StatusFailed:
				_ = c.Fail(me, "r1_c1", "boom", t0)
			case StatusCancelled:
				_, _ = c.Cancel("", t0)
			}
			return c
		}
	}
	result := func(call string) Answer {
		return Answer{RunID: "r1_c1", CallID: call, Kind: deferred.KindCall, Result: &wire.CallReply{ToolCallID: call, Value: json.RawMessage(`1`)}}
	}
	untrustedDecision := func(call string) Answer {
		return Answer{RunID: "r1_c1", CallID: call, Kind: deferred.KindApproval, Decision: &wire.Decision{ToolCallID: call, Approved: true, ApproverID: "mallory"},
			TrustErr: errors.New(`approver "mallory" is not trusted`)}
	}
	conflict := func(err error) bool { var ce *ConflictError; return errors.As(err, &ce) }
	// approvedCall is a paused batch whose approval call a, of a tool its
	// workers run, was approved (with override args when not nil), and
	// whose external call b waits.
	approvedCall := func(override json.RawMessage) func() *State {
		return func() *State {
			c := paused(false, false)
			a := c.Batch.Call("a")
			a.Dispatch = time.Minute
			a.Reply = &Reply{Outcome: OutcomeApproved, OverrideArgs: override, By: "bot", At: now}
			return c
		}
	}

	type check func(t *testing.T, c *State)
	status := func(want Status) check {
		return func(t *testing.T, c *State) {
			if c.Status != want {
				t.Errorf("status %s, want %s", c.Status, want)
			}
		}
	}
	noLease := func(t *testing.T, c *State) {
		if c.Lease != nil {
			t.Errorf("lease %+v kept", c.Lease)
		}
	}
	leaseOf := func(owner, run string) check {
		return func(t *testing.T, c *State) {
			if !c.HoldsLease(owner, run) || !c.LeaseLive(now) {
				t.Errorf("lease %+v, want %s's on %s", c.Lease, owner, run)
			}
		}
	}

	cases := []struct {
		name  string
		from  func() *State
		do    func(c *State) error
		check []check
	}{
		{"start a completed one", finished(StatusCompleted), func(c *State) error {
			repeat, err := c.Start(RunRecord{RunID: "r2_c1", Status: StatusRunning}, &Lease{Owner: me, RunID: "r2_c1", Until: now.Add(ttl)}, now)
			if repeat {
				return errors.New("repeat")
			}
			return err
		}, []check{status(StatusRunning), leaseOf(me, "r2_c1"), func(t *testing.T, c *State) {
			if c.Output != "" || len(c.Runs) != 2 {
				t.Errorf("output %q, %d runs", c.Output, len(c.Runs))
			}
		}}},
		{"start a cancelled one", finished(StatusCancelled), func(c *State) error {
			_, err := c.Start(RunRecord{RunID: "r2_c1"}, &Lease{Owner: me, RunID: "r2_c1", Until: now.Add(ttl)}, now)
			return err
		}, []check{status(StatusRunning)}},
		{"start a repeat", finished(StatusCompleted), func(c *State) error {
			if repeat, err := c.Start(RunRecord{RunID: "r1_c1"}, nil, now); !repeat || err != nil {
				return errors.New("not a repeat")
			}
			return nil
		}, []check{status(StatusCompleted)}},
		{"start one cancelled while paused resumes its batch", func() *State {
			c := paused(false, true)
			_, _ = c.Cancel("", t0)
			return c
		}, func(c *State) error {
			_, err := c.Start(RunRecord{RunID: "r2_c1", Prompt: "p2"}, &Lease{Owner: me, RunID: "r2_c1", Until: now.Add(ttl)}, now)
			return err
		}, []check{status(StatusRunning), leaseOf(me, "r2_c1"), func(t *testing.T, c *State) {
			if c.Batch == nil || c.Batch.FollowUpRunID != "r2_c1" || !c.Batch.Complete() {
				t.Errorf("batch %+v, want the cancelled one, followed up by r2_c1", c.Batch)
			}
		}}},
		{"prompt a paused one", func() *State { return paused(false, true) }, func(c *State) error {
			if repeat, err := c.AddPrompt("r2_c1", "more", now); repeat || err != nil {
				return fmt.Errorf("repeat %v, %v", repeat, err)
			}
			if repeat, err := c.AddPrompt("r2_c1", "more", now); !repeat || err != nil {
				return fmt.Errorf("a retry: repeat %v, %v", repeat, err)
			}
			if _, err := c.AddPrompt("r2_c1", "other", now); !errors.Is(err, ErrOtherPrompt) {
				return fmt.Errorf("the same run with another prompt: %v", err)
			}
			if _, err := c.AddPrompt("r3_c1", "again", now); !conflict(err) {
				return fmt.Errorf("a second prompt: %v", err)
			}
			c.Batch.Calls[0].Reply = &Reply{Outcome: OutcomeApproved, At: now}
			if !c.Claim(me, "r2_c1", now, ttl) {
				return errors.New("not claimed")
			}
			return nil
		}, []check{status(StatusResuming), leaseOf(me, "r2_c1"), func(t *testing.T, c *State) {
			if rec := c.RunRecord("r2_c1"); rec == nil || rec.Prompt != "more" {
				t.Errorf("follow-up run %+v, want the prompt", rec)
			}
		}}},
		{"prompt a running one is refused", running, func(c *State) error {
			if _, err := c.AddPrompt("r2_c1", "more", now); !conflict(err) {
				return fmt.Errorf("not refused: %v", err)
			}
			return nil
		}, []check{status(StatusRunning)}},
		{"start a paused one is refused", func() *State { return paused(false, false) }, func(c *State) error {
			if _, err := c.Start(RunRecord{RunID: "r2_c1"}, nil, now); !conflict(err) {
				return errors.New("not refused")
			}
			return nil
		}, []check{status(StatusPaused)}},
		{"pause", running, func(c *State) error {
			return c.Pause(me, "r1_c1", hist, batch("r1_c1", false), now)
		}, []check{status(StatusPaused), noLease, func(t *testing.T, c *State) {
			if c.Runs[0].Status != StatusPaused || !c.Runs[0].EndedAt.Equal(now) || len(c.History) != 1 {
				t.Errorf("run %+v, history %d", c.Runs[0], len(c.History))
			}
		}}},
		{"pause without the lease", running, func(c *State) error {
			if err := c.Pause(other, "r1_c1", hist, batch("r1_c1"), now); !errors.Is(err, ErrLeaseLost) {
				return errors.New("not refused")
			}
			return nil
		}, []check{status(StatusRunning), leaseOf(me, "r1_c1")}},
		{"complete", running, func(c *State) error {
			return c.Complete(me, "r1_c1", hist, "done", now)
		}, []check{status(StatusCompleted), noLease, func(t *testing.T, c *State) {
			if c.Output != "done" || c.Batch != nil {
				t.Errorf("output %q batch %v", c.Output, c.Batch)
			}
		}}},
		{"complete of another run", running, func(c *State) error {
			if err := c.Complete(me, "r9_c1", hist, "", now); !errors.Is(err, ErrLeaseLost) {
				return errors.New("not refused")
			}
			return nil
		}, []check{status(StatusRunning)}},
		{"complete the follow-up", resuming, func(c *State) error {
			return c.Complete(me, "r2_c1", hist, "done", now)
		}, []check{status(StatusCompleted), func(t *testing.T, c *State) {
			if c.Runs[1].Status != StatusCompleted {
				t.Errorf("follow-up run %+v", c.Runs[1])
			}
		}}},
		{"fail", running, func(c *State) error {
			return c.Fail(me, "r1_c1", "model down", now)
		}, []check{status(StatusFailed), noLease, func(t *testing.T, c *State) {
			if c.Error != "model down" || c.Runs[0].Error != "model down" {
				t.Errorf("error %q / %q", c.Error, c.Runs[0].Error)
			}
		}}},
		{"renew", running, func(c *State) error {
			return c.Renew(me, "r1_c1", now.Add(time.Hour))
		}, []check{func(t *testing.T, c *State) {
			if !c.Lease.Until.Equal(now.Add(time.Hour)) {
				t.Errorf("lease until %s", c.Lease.Until)
			}
		}}},
		{"renew a lease taken over", running, func(c *State) error {
			if err := c.Renew(other, "r1_c1", now); !errors.Is(err, ErrLeaseLost) {
				return errors.New("not refused")
			}
			return nil
		}, nil},
		{"release", running, func(c *State) error {
			if !c.Release(me, "r1_c1") {
				return errors.New("not released")
			}
			return nil
		}, []check{func(t *testing.T, c *State) {
			if c.LeaseLive(now) {
				t.Error("lease still live")
			}
		}}},
		{"take over a live lease", running, func(c *State) error {
			if id, _ := c.TakeOver(other, now, ttl); id != "" {
				return errors.New("taken")
			}
			return nil
		}, []check{leaseOf(me, "r1_c1")}},
		{"take over an expired lease", func() *State { return expiredLease(running()) }, func(c *State) error {
			if id, _ := c.TakeOver(other, now, ttl); id != "r1_c1" {
				return errors.New("not taken: " + id)
			}
			return nil
		}, []check{leaseOf(other, "r1_c1"), status(StatusRunning)}},
		{"take over a follow-up", func() *State { return expiredLease(resuming()) }, func(c *State) error {
			if id, _ := c.TakeOver(other, now, ttl); id != "r2_c1" {
				return errors.New("not the follow-up: " + id)
			}
			return nil
		}, []check{leaseOf(other, "r2_c1"), status(StatusResuming)}},
		{"take over with no running run fails", func() *State {
			c := running()
			c.Lease, c.Runs[0].Status = nil, StatusPaused
			return c
		}, func(c *State) error {
			if id, failed := c.TakeOver(other, now, ttl); id != "" || !failed {
				return errors.New("not failed")
			}
			return nil
		}, []check{status(StatusFailed)}},
		{"claim handed over: lease expired at once", func() *State { return paused(true, true) }, func(c *State) error {
			if !c.Claim(me, "r2_c1", now, 0) || c.LeaseLive(now) {
				return errors.New("not claimed with an expired lease")
			}
			return nil
		}, []check{status(StatusResuming)}},
		{"wait for an agent: noted", func() *State { return expiredLease(resuming()) }, func(c *State) error {
			if noted, failed, _ := c.WaitForAgent("no replica runs agent \"a\"", now, time.Hour); !noted || failed {
				return errors.New("not noted")
			}
			return nil
		}, []check{status(StatusResuming), func(t *testing.T, c *State) {
			if c.Unserved == "" || !c.UnservedSince.Equal(now) {
				t.Errorf("unserved %q since %v", c.Unserved, c.UnservedSince)
			}
		}}},
		{"wait for an agent: fails after the wait", func() *State {
			c := expiredLease(resuming())
			c.Unserved, c.UnservedSince = "no replica runs agent \"a\"", now.Add(-2*time.Hour)
			return c
		}, func(c *State) error {
			if _, failed, run := c.WaitForAgent("x", now, time.Hour); !failed || run != "r2_c1" {
				return errors.New("not failed")
			}
			return nil
		}, []check{status(StatusFailed), func(t *testing.T, c *State) {
			if !strings.Contains(c.Error, `no replica runs agent "a"`) || c.RunRecord("r2_c1").Status != StatusFailed {
				t.Errorf("error %q, run %+v", c.Error, c.RunRecord("r2_c1"))
			}
		}}},
		{"wait for an agent with a live lease", resuming, func(c *State) error {
			if noted, failed, _ := c.WaitForAgent("x", now, time.Hour); noted || failed {
				return errors.New("changed")
			}
			return nil
		}, []check{status(StatusResuming)}},
		{"set agent clears unserved", func() *State {
			c := expiredLease(resuming())
			c.Unserved, c.UnservedSince = "x", now
			return c
		}, func(c *State) error {
			c.SetAgent("a", "d2")
			return nil
		}, []check{func(t *testing.T, c *State) {
			if c.Agent != "a" || c.AgentDigest != "d2" || c.Unserved != "" || !c.UnservedSince.IsZero() {
				t.Errorf("agent %q digest %q unserved %q", c.Agent, c.AgentDigest, c.Unserved)
			}
		}}},
		{"claim a complete batch", func() *State { return paused(true, true) }, func(c *State) error {
			if !c.Claim(me, "r2_c1", now, ttl) {
				return errors.New("not claimed")
			}
			return nil
		}, []check{status(StatusResuming), leaseOf(me, "r2_c1"), func(t *testing.T, c *State) {
			if c.Batch.FollowUpRunID != "r2_c1" || len(c.Runs) != 2 {
				t.Errorf("follow-up %q, %d runs", c.Batch.FollowUpRunID, len(c.Runs))
			}
		}}},
		{"claim an incomplete batch", func() *State { return paused(true, false) }, func(c *State) error {
			if c.Claim(me, "r2_c1", now, ttl) {
				return errors.New("claimed")
			}
			return nil
		}, []check{status(StatusPaused)}},
		{"claim twice", resuming, func(c *State) error {
			if c.Claim(other, "r3_c1", now, ttl) {
				return errors.New("claimed again")
			}
			return nil
		}, []check{leaseOf(me, "r2_c1")}},
		{"apply a result", func() *State { return paused(true, false) }, func(c *State) error {
			if v, why := c.Apply(result("b"), now); v != VerdictApplied {
				return errors.New(v.String() + ": " + why)
			}
			return nil
		}, []check{func(t *testing.T, c *State) {
			if !c.claimable() {
				t.Error("batch not complete")
			}
		}}},
		{"apply a duplicate", func() *State { return paused(false, true) }, func(c *State) error {
			if v, _ := c.Apply(result("b"), now); v != VerdictDuplicate {
				return errors.New(v.String())
			}
			return nil
		}, nil},
		{"apply an untrusted decision to an answered call", func() *State { return paused(true, false) }, func(c *State) error {
			if v, why := c.Apply(untrustedDecision("a"), now); v != VerdictRefused || !strings.Contains(why, "not trusted") {
				return errors.New(v.String() + ": " + why)
			}
			return nil
		}, []check{func(t *testing.T, c *State) {
			if pc := c.Batch.Call("a"); pc.Refused != 1 || pc.Duplicates != 0 {
				t.Errorf("call %+v", pc)
			}
		}}},
		{"apply an untrusted decision to a batch that is over", func() *State {
			c := resuming()
			if err := c.Complete(me, "r2_c1", hist, "out", now); err != nil {
				t.Fatal(err)
			}
			return c
		}, func(c *State) error {
			if v, why := c.Apply(untrustedDecision("a"), now); v != VerdictRefused || !strings.Contains(why, "not trusted") {
				return errors.New(v.String() + ": " + why)
			}
			if v, _ := c.Apply(result("b"), now); v != VerdictDuplicate {
				return errors.New("a repeated result: " + v.String())
			}
			return nil
		}, []check{func(t *testing.T, c *State) {
			if c.StaleReplies != 2 {
				t.Errorf("%d stale replies, want 2", c.StaleReplies)
			}
		}}},
		{"apply a result for a call never made to a batch that is over", func() *State {
			c := resuming()
			calls := []agent.Message{{Kind: agent.KindResponse, RunID: "r1_c1", Parts: []agent.Part{
				{Kind: agent.PartToolCall, ToolCallID: "a"}, {Kind: agent.PartToolCall, ToolCallID: "b"},
			}}}
			if err := c.Complete(me, "r2_c1", calls, "out", now); err != nil {
				t.Fatal(err)
			}
			return c
		}, func(c *State) error {
			if v, why := c.Apply(result("ghost"), now); v != VerdictRefused || why != "run r1_c1 issued no call ghost" {
				return errors.New(v.String() + ": " + why)
			}
			if v, _ := c.Apply(result("b"), now); v != VerdictDuplicate {
				return errors.New("a repeated result: " + v.String())
			}
			return nil
		}, nil},
		{"apply after the deadline", func() *State { return paused(false, false) }, func(c *State) error {
			if v, _ := c.Apply(result("b"), now.Add(2*time.Hour)); v != VerdictLate {
				return errors.New(v.String())
			}
			return nil
		}, []check{func(t *testing.T, c *State) {
			if r := c.Batch.Call("b").Reply; r == nil || !r.Expired {
				t.Errorf("call not settled as expired: %+v", r)
			}
		}}},
		{"apply after a cancel", func() *State {
			c := paused(false, false)
			_, _ = c.Cancel("", t0)
			return c
		}, func(c *State) error {
			if v, _ := c.Apply(result("b"), now); v != VerdictLate {
				return errors.New(v.String())
			}
			return nil
		}, []check{status(StatusCancelled), func(t *testing.T, c *State) {
			if pc := c.Batch.Call("b"); pc.Late != 1 || pc.Reply.Outcome != OutcomeFailed {
				t.Errorf("call %+v", pc)
			}
		}}},
		{"expire", func() *State { return paused(false, false) }, func(c *State) error {
			if n := len(c.Expire(now.Add(2 * time.Hour))); n != 2 {
				return errors.New("expired " + string(rune('0'+n)))
			}
			return nil
		}, []check{status(StatusPaused), func(t *testing.T, c *State) {
			a := c.Batch.Call("a").Reply
			if a.Outcome != OutcomeDenied || string(a.Metadata) != `{"reason":"expired"}` || !c.claimable() {
				t.Errorf("approval settled as %+v", a)
			}
		}}},
		{"expire before the deadline", func() *State { return paused(false, false) }, func(c *State) error {
			if len(c.Expire(now)) != 0 {
				return errors.New("expired early")
			}
			return nil
		}, nil},
		{"cancel a paused one", func() *State { return paused(false, true) }, func(c *State) error {
			settled, err := c.Cancel("", now)
			if err != nil || len(settled) != 1 {
				return errors.New("settled " + string(rune('0'+len(settled))))
			}
			return nil
		}, []check{status(StatusCancelled), noLease, func(t *testing.T, c *State) {
			a := c.Batch.Call("a").Reply
			if a.Outcome != OutcomeDenied || a.Message != CancelledMessage || !a.Cancelled || c.Batch.Call("b").Reply.Cancelled {
				t.Errorf("approval settled as %+v", a)
			}
			if c.Runs[0].Status != StatusPaused {
				t.Errorf("ended run changed: %+v", c.Runs[0])
			}
			if c.claimable() {
				t.Error("a cancelled batch can be claimed")
			}
		}}},
		{"cancel a running one", running, func(c *State) error {
			_, err := c.Cancel("user asked", now)
			return err
		}, []check{status(StatusCancelled), noLease, func(t *testing.T, c *State) {
			if c.Runs[0].Status != StatusCancelled || c.Error != "user asked" {
				t.Errorf("run %+v, error %q", c.Runs[0], c.Error)
			}
			if err := c.Complete(me, "r1_c1", hist, "late", now); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("the cancelled run's end was taken: %v", err)
			}
		}}},
		{"cancel a resuming one", resuming, func(c *State) error {
			_, err := c.Cancel("", now)
			return err
		}, []check{status(StatusCancelled), noLease}},
		{"cancel a finished one", finished(StatusCompleted), func(c *State) error {
			if _, err := c.Cancel("", now); !conflict(err) {
				return errors.New("not refused")
			}
			return nil
		}, []check{status(StatusCompleted)}},
		{"delete a finished one", finished(StatusCancelled), func(c *State) error {
			return c.Delete(now)
		}, []check{status(StatusDeleted), noLease, func(t *testing.T, c *State) {
			if c.Output != "" || c.Error != "" {
				t.Errorf("the tombstone keeps the answer: output %q, error %q", c.Output, c.Error)
			}
			if _, err := c.Start(RunRecord{RunID: "r2_c1"}, nil, now); !conflict(err) {
				t.Error("a deleted one can be started")
			}
			if _, err := c.Cancel("", now); err == nil {
				t.Error("a deleted one can be cancelled")
			}
		}}},
		{"delete one under way is refused", func() *State { return paused(false, true) }, func(c *State) error {
			if err := c.Delete(now); !conflict(err) {
				return fmt.Errorf("not refused: %v", err)
			}
			return nil
		}, []check{status(StatusPaused)}},
		{"inline batch", running, func(c *State) error {
			return c.BeginInline(me, "r1_c1", batch("r1_c1", true, false), now)
		}, []check{status(StatusRunning), func(t *testing.T, c *State) {
			if !c.Batch.Inline || c.claimable() {
				t.Error("inline batch claimable")
			}
			req := &deferred.Requests{Calls: []deferred.Call{{ToolCallID: "b"}}, Approvals: []deferred.Call{{ToolCallID: "a"}}}
			res := c.TakeInline("r1_c1", req, now)
			if res == nil || len(res.Approvals) != 1 || !c.Batch.Call("a").Taken || c.TakeInline("r1_c1", req, now) != nil {
				t.Errorf("taken %+v", res)
			}
		}}},
		{"inline batch without the lease", running, func(c *State) error {
			if err := c.BeginInline(other, "r1_c1", batch("r1_c1"), now); !errors.Is(err, ErrLeaseLost) {
				return errors.New("not refused")
			}
			return nil
		}, nil},
		{"dispatch an approved call", approvedCall(nil), func(c *State) error {
			if !c.Dispatch("a", now) || c.Dispatch("a", now) {
				return errors.New("dispatching")
			}
			return nil
		}, []check{status(StatusPaused), func(t *testing.T, c *State) {
			pc := c.Batch.Call("a")
			if pc.Kind != deferred.KindCall || pc.Reply != nil || pc.Approval == nil || pc.Decision() != pc.Approval ||
				pc.Published || !pc.Deadline.Equal(now.Add(time.Minute)) || c.claimable() {
				t.Errorf("call %+v; want an external call pending until %s, its approval kept", pc, now.Add(time.Minute))
			}
			req := c.Batch.Requests()
			if len(req.Approvals) != 0 || len(req.Calls) != 2 || req.Calls[0].ToolCallID != "a" {
				t.Errorf("requests %+v, want the dispatched call among the external calls", req)
			}
		}}},
		{"dispatch a call approved with override args", approvedCall(json.RawMessage(`{"x":2}`)), func(c *State) error {
			if !c.Dispatch("a", now) || c.Dispatch("b", now) {
				return errors.New("dispatching")
			}
			return nil
		}, []check{func(t *testing.T, c *State) {
			req := c.Batch.Requests()
			if pc := c.Batch.Call("a"); string(pc.RunArgs()) != `{"x":2}` || len(req.Calls) != 2 || string(req.Calls[0].Args) != `{"x":2}` {
				t.Errorf("call %+v, requests %+v; want it to run with the override args", pc, req)
			}
		}}},
		{"a dispatched call's decision again, then its result", func() *State {
			c := approvedCall(nil)()
			c.Dispatch("a", now)
			return c
		}, func(c *State) error {
			again := Answer{RunID: "r1_c1", CallID: "a", Kind: deferred.KindApproval, Decision: &wire.Decision{ToolCallID: "a", ArgsDigest: "d", Approved: true}}
			if v, why := c.Apply(again, now); v != VerdictDuplicate {
				return errors.New("the decision again: " + v.String() + ": " + why)
			}
			for _, id := range []string{"a", "b"} {
				if v, why := c.Apply(result(id), now); v != VerdictApplied {
					return errors.New("result of " + id + ": " + v.String() + ": " + why)
				}
			}
			return nil
		}, []check{func(t *testing.T, c *State) {
			res := c.Batch.Results()
			if _, ok := res.Calls["a"]; !ok || len(res.Approvals) != 0 || !c.claimable() {
				t.Errorf("results %+v; want the dispatched call's result, the batch complete", res)
			}
		}}},
		{"expire a dispatched call", func() *State {
			c := approvedCall(nil)()
			c.Dispatch("a", now)
			return c
		}, func(c *State) error {
			if n := len(c.Expire(now.Add(2 * time.Minute))); n != 1 {
				return fmt.Errorf("expired %d", n)
			}
			return nil
		}, []check{func(t *testing.T, c *State) {
			if r := c.Batch.Call("a").Reply; r == nil || r.Outcome != OutcomeFailed || r.Message != "timed out" {
				t.Errorf("reply %+v, want timed out", r)
			}
		}}},
		{"mark published", func() *State { return paused(false, false) }, func(c *State) error {
			if !c.MarkPublished("r1_c1", []string{"a", "b"}, now) || c.MarkPublished("r1_c1", []string{"a"}, now) {
				return errors.New("marking")
			}
			return nil
		}, []check{func(t *testing.T, c *State) {
			if !c.Batch.Call("a").PublishedAt.Equal(now) {
				t.Error("published at")
			}
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.from()
			before, fp := c.Clone(), FingerprintOf(c)
			was := encodeSorted(before)
			if err := tc.do(c); err != nil {
				t.Fatal(err)
			}
			// A clone shares what only grows, and the runs until one of
			// them changes them: the transition leaves it as it was.
			if !bytes.Equal(encodeSorted(before), was) {
				t.Errorf("the transition changed a clone taken before it: %+v", before)
			}
			for _, ch := range tc.check {
				ch(t, c)
			}
			// What the store appends for the transition, folded into the
			// state it started from, gives the state it left; so does the
			// whole state written as a first record.
			checkRecord(t, "the change", before, Diff(fp, c), c)
			checkRecord(t, "the whole state", &State{}, FullRecord(c), c)
		})
	}
}

// checkRecord checks that r, through its stored form, turns from into want.
func checkRecord(t *testing.T, what string, from *State, r *Record, want *State) {
	t.Helper()
	b, err := msgpack.Marshal(r)
	if err != nil {
		t.Fatalf("%s: encode record: %v", what, err)
	}
	var stored Record
	if err := msgpack.Unmarshal(b, &stored); err != nil {
		t.Fatalf("%s: decode record: %v", what, err)
	}
	was := encodeSorted(from)
	got := from.Clone()
	if err := got.Fold(&stored); err != nil {
		t.Fatalf("%s: apply: %v", what, err)
	}
	if !bytes.Equal(encodeSorted(from), was) {
		t.Errorf("%s: folding into a clone changed the state it was cloned from", what)
	}
	if g, w := encodeSorted(got), encodeSorted(want); !bytes.Equal(g, w) {
		t.Errorf("%s: folded state differs from the transition's\n got %+v\nwant %+v", what, got, want)
	}
}

// Escalating a clone leaves the state it was cloned from as it was: the
// cached state is read by the publication of its batch meanwhile.
func TestEscalateLeavesTheCloneSource(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &State{ID: "c1", Status: StatusPaused, Batch: &Batch{RunID: "r1_c1", Calls: []*PendingCall{
		{ToolCallID: "a", Kind: deferred.KindApproval, Deadline: t0.Add(time.Hour), Escalation: &Escalation{At: t0}},
	}}}
	n := c.Clone()
	if got := n.Escalate(t0); len(got) != 1 {
		t.Fatalf("escalated %d calls, want 1", len(got))
	}
	if c.Batch.Calls[0].Escalation.Done {
		t.Error("escalating the clone escalated the state it was cloned from")
	}
}

// encodeSorted is v's encoding with map keys sorted: equal values, equal
// bytes.
func encodeSorted(v any) []byte { return sortedEncoders.appendTo(nil, v) }
