package orchestrator

import (
	"time"

	"github.com/toolgate/toolgate/internal/telemetry"
)

// observer is told what happened, once: what became of each reply, calls
// expired at their deadline, a call published while no worker takes its
// tool, a conversation a reconcile pass had to leave, a run's end. What
// counts it (the Stats, the Prometheus metrics) is behind it, so the parts
// say what happened once instead of counting it twice.
type observer interface {
	reply(replyObservation)
	// expired is told of each call settled as expired, by kind.
	expired(kind string)
	unservedCall(tool string)
	reconcileError()
	runFinished(agent, status string)
	// appendUnresolved is told of each round of the store's timeout that
	// left an append's outcome unknown.
	appendUnresolved()
	// runStarted, runRelaunched and followUp are told of each run
	// launched as a start, a take-over or a claimed follow-up;
	// endWritten of each write that ended a run.
	runStarted()
	runRelaunched()
	followUp()
	endWritten()
	// storedWithEnd is told of each deferred record (tentative.go)
	// stored with its run's end, a start's or a follow-up's claim, as it
	// is written (n 1), and again if the write failed (n -1).
	storedWithEnd(start bool, n int64)
	// runUncounted takes back a runStarted (start) or followUp whose
	// deferred record was dropped or abandoned; deferredDropped is told
	// of each dropped because the conversation changed first.
	runUncounted(start bool)
	deferredDropped()
}

// replyObservation is what became of one reply.
type replyObservation struct {
	kind        string // call or approval, as the subject says
	verdict     string // verdict.String(), or replyInvalid, replyUnknownRun, replyError
	tool        string // when known
	redelivered bool
	// Of a recorded reply: whether it found its call past the deadline
	// and settled it as expired, whether it is a denial, and the time from
	// the call's publication to its answer (zero when unknown).
	expired  bool
	decision bool
	denied   bool
	latency  time.Duration
}

// recorded fills in what the group commit found.
func (r *replyObservation) recorded(j *replyJob) {
	r.verdict = j.v.String()
	r.expired = j.expired
	r.decision = j.in.decision != nil
	r.denied = r.decision && !j.in.decision.Approved
	if !j.publishedAt.IsZero() {
		r.latency = j.at.Sub(j.publishedAt)
	}
}

// counters is the observer: the Stats and the metrics.
type counters struct {
	stats *Stats
	m     *telemetry.OrchestratorMetrics
}

func (c counters) reply(r replyObservation) {
	s, m := c.stats, c.m
	m.Reply(r.kind, r.verdict)
	if r.redelivered {
		m.Redelivered(r.tool)
	}
	switch r.verdict {
	case verdictApplied.String():
		s.RepliesApplied.Add(1)
		if r.latency > 0 {
			if r.decision {
				m.DecisionLatency(r.tool, r.latency)
			} else {
				m.ResultLatency(r.tool, r.latency)
			}
		}
		if r.denied {
			m.Denied(r.tool)
		}
	case verdictDuplicate.String():
		s.Duplicates.Add(1)
	case verdictLate.String():
		s.Late.Add(1)
		s.DeadLettered.Add(1)
		m.DeadLetter(r.verdict)
		if r.expired {
			s.Expired.Add(1)
			m.Expired(r.kind)
		}
	case replyError:
		s.TransientErrors.Add(1)
	case verdictElsewhere.String():
		s.DecisionsHandedOver.Add(1)
	case verdictCounted.String():
		s.ApprovalsCounted.Add(1)
	default: // refused, invalid, unknown run
		s.Refused.Add(1)
		s.DeadLettered.Add(1)
		m.DeadLetter(r.verdict)
	}
}

func (c counters) expired(kind string) {
	c.stats.Expired.Add(1)
	c.m.Expired(kind)
}

func (c counters) unservedCall(tool string) {
	c.stats.UnservedCalls.Add(1)
	c.m.UnservedCall(tool)
}

func (c counters) reconcileError() {
	c.stats.ReconcileErrors.Add(1)
	c.m.ReconcileError()
}

func (c counters) runFinished(agent, status string) { c.m.RunFinished(agent, status) }

func (c counters) appendUnresolved() {
	c.stats.AppendsUnresolved.Add(1)
	c.m.AppendUnresolved()
}

func (c counters) runStarted()    { c.stats.RunsStarted.Add(1) }
func (c counters) runRelaunched() { c.stats.RunsRelaunched.Add(1) }
func (c counters) followUp()      { c.stats.FollowUps.Add(1) }
func (c counters) endWritten()    { c.stats.EndWrites.Add(1) }

func (c counters) storedWithEnd(start bool, n int64) {
	if start {
		c.stats.StartedWithEnd.Add(n)
		return
	}
	c.stats.ClaimedWithEnd.Add(n)
}

func (c counters) runUncounted(start bool) {
	if start {
		c.stats.RunsStarted.Add(-1)
		return
	}
	c.stats.FollowUps.Add(-1)
}

func (c counters) deferredDropped() { c.stats.TentativeDropped.Add(1) }
