package orchestrator

import (
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/telemetry"
)

// Observer is told what the orchestrator did, each thing once: what became
// of each reply, calls published and expired, runs started, taken over,
// followed up or lost, records written and read (Config.Observer). What
// counts it is behind it: the metrics (Config.Metrics), always told, and
// the Observer a caller passes in, a *Counts for tests, the bench and the
// soak. The engine keeps no counts for its callers. Its methods are the
// package's own: the Observers are those it makes.
type Observer interface{ observer }

// observer is what the parts tell, once each thing, so that they say what
// happened once instead of counting it twice.
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
	// deferred record was dropped or abandoned; tentativeDropped is told
	// of each dropped because the conversation changed first.
	runUncounted(start bool)
	tentativeDropped()
	// published is told of each publish of a batch's calls (calls of
	// them); leaseLost of each run that lost its lease; handedOver of each
	// run handed to another agent's replicas.
	published(calls int)
	leaseLost()
	handedOver()
	// reconcileStarted and reconcileEnded bracket each reconcile pass.
	reconcileStarted()
	reconcileEnded()
	// stateWritten is told of each record appended to a conversation's
	// log (attempts, conflicts included) and its bytes; stateRead of
	// each read of logs.
	stateWritten(bytes int)
	stateRead()
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

// newObserver is what the parts tell: the metrics, and also, when set, the
// caller's Observer.
func newObserver(m *telemetry.OrchestratorMetrics, also Observer) observer {
	if also == nil {
		return metrics{m}
	}
	return both{metrics{m}, also}
}

// metrics is the Observer that the Prometheus metrics are (nil-safe:
// a nil m counts nothing).
type metrics struct {
	m *telemetry.OrchestratorMetrics
}

func (o metrics) reply(r replyObservation) {
	m := o.m
	m.Reply(r.kind, r.verdict)
	if r.redelivered {
		m.Redelivered(r.tool)
	}
	switch r.verdict {
	case conversation.VerdictApplied.String():
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
	case conversation.VerdictLate.String():
		m.DeadLetter(r.verdict)
		if r.expired {
			m.Expired(r.kind)
		}
	case replyError, conversation.VerdictDuplicate.String(), conversation.VerdictElsewhere.String(), conversation.VerdictCounted.String():
	default: // refused, invalid, unknown run
		m.DeadLetter(r.verdict)
	}
}

func (o metrics) expired(kind string)              { o.m.Expired(kind) }
func (o metrics) unservedCall(tool string)         { o.m.UnservedCall(tool) }
func (o metrics) reconcileError()                  { o.m.ReconcileError() }
func (o metrics) runFinished(agent, status string) { o.m.RunFinished(agent, status) }
func (o metrics) appendUnresolved()                { o.m.AppendUnresolved() }
func (metrics) runStarted()                        {}
func (metrics) runRelaunched()                     {}
func (metrics) followUp()                          {}
func (metrics) endWritten()                        {}
func (metrics) storedWithEnd(bool, int64)          {}
func (metrics) runUncounted(bool)                  {}
func (metrics) tentativeDropped()                  {}
func (metrics) published(int)                      {}
func (metrics) leaseLost()                         {}
func (metrics) handedOver()                        {}
func (metrics) reconcileStarted()                  {}
func (metrics) reconcileEnded()                    {}
func (metrics) stateWritten(int)                   {}
func (metrics) stateRead()                         {}

// both tells a and b.
type both struct{ a, b observer }

func (o both) reply(r replyObservation) { o.a.reply(r); o.b.reply(r) }
func (o both) expired(kind string)      { o.a.expired(kind); o.b.expired(kind) }
func (o both) unservedCall(tool string) { o.a.unservedCall(tool); o.b.unservedCall(tool) }
func (o both) reconcileError()          { o.a.reconcileError(); o.b.reconcileError() }
func (o both) runFinished(agent, status string) {
	o.a.runFinished(agent, status)
	o.b.runFinished(agent, status)
}
func (o both) appendUnresolved() { o.a.appendUnresolved(); o.b.appendUnresolved() }
func (o both) runStarted()       { o.a.runStarted(); o.b.runStarted() }
func (o both) runRelaunched()    { o.a.runRelaunched(); o.b.runRelaunched() }
func (o both) followUp()         { o.a.followUp(); o.b.followUp() }
func (o both) endWritten()       { o.a.endWritten(); o.b.endWritten() }
func (o both) storedWithEnd(start bool, n int64) {
	o.a.storedWithEnd(start, n)
	o.b.storedWithEnd(start, n)
}
func (o both) runUncounted(start bool) { o.a.runUncounted(start); o.b.runUncounted(start) }
func (o both) tentativeDropped()       { o.a.tentativeDropped(); o.b.tentativeDropped() }
func (o both) published(calls int)     { o.a.published(calls); o.b.published(calls) }
func (o both) leaseLost()              { o.a.leaseLost(); o.b.leaseLost() }
func (o both) handedOver()             { o.a.handedOver(); o.b.handedOver() }
func (o both) reconcileStarted()       { o.a.reconcileStarted(); o.b.reconcileStarted() }
func (o both) reconcileEnded()         { o.a.reconcileEnded(); o.b.reconcileEnded() }
func (o both) stateWritten(bytes int)  { o.a.stateWritten(bytes); o.b.stateWritten(bytes) }
func (o both) stateRead()              { o.a.stateRead(); o.b.stateRead() }

// Counts is an Observer that counts what the orchestrator did: for tests,
// the bench and the soak, which pass one in (Config.Observer) and read it.
// Its zero value is ready.
type Counts struct {
	RunsStarted     atomic.Int64
	RunsRelaunched  atomic.Int64
	FollowUps       atomic.Int64
	Published       atomic.Int64
	RepliesApplied  atomic.Int64
	Duplicates      atomic.Int64
	Refused         atomic.Int64
	Late            atomic.Int64
	Expired         atomic.Int64
	DeadLettered    atomic.Int64
	LeaseLost       atomic.Int64
	TransientErrors atomic.Int64
	// StateWrites and StateBytes count the records appended to
	// conversation logs (attempts, conflicts included) and their bytes.
	StateWrites atomic.Int64
	StateBytes  atomic.Int64
	// StateReads counts the reads of conversation logs: a state not cached,
	// a cached one brought up to date, a catch-up after a conflict.
	StateReads atomic.Int64
	// EndWrites counts, of StateWrites, the appends that store a run's end
	// when it completes or fails: made after the run gave its slot back,
	// within a window of their own, and waited for by nothing on a call's
	// way (only by the conversation's own completion).
	EndWrites atomic.Int64
	// CallBatches counts the publishes of a batch's calls, each one
	// round trip whatever the number of calls; a paused run does not wait
	// for it.
	CallBatches atomic.Int64
	// HandedOver counts the runs this replica handed to the replicas of
	// another agent (or config digest) by a nudge.
	HandedOver atomic.Int64
	// DecisionsHandedOver counts the decisions this replica left to the
	// others, not holding their conversation's agent config (policy.go).
	DecisionsHandedOver atomic.Int64
	// ApprovalsCounted counts the approvals recorded towards a quorum
	// that they did not complete (ToolConfig.Approvals).
	ApprovalsCounted atomic.Int64
	// UnservedCalls counts the external calls published while no worker
	// took calls of their tool (each told by a tool_unserved event).
	UnservedCalls atomic.Int64
	// ReconcilesStarted and ReconcilesEnded count reconcile passes (the
	// loop's and Reconcile's): a pass over many due conversations holds
	// their index entries while it runs, which a heap measurement taken
	// meanwhile counts (the benchmark waits until the two are equal).
	ReconcilesStarted, ReconcilesEnded atomic.Int64
	// ReconcileErrors counts the conversations a reconcile pass (or a
	// retention sweep) had to leave as they were (one it could not read, a
	// change that failed).
	ReconcileErrors atomic.Int64
	// ClaimedWithEnd counts the follow-ups whose claim was stored with
	// their end, as one record (tentative.go), and StartedWithEnd the new
	// conversations whose first record holds their first run's pause or
	// end; TentativeDropped the runs dropped because the conversation
	// changed before what they started from was stored (a follow-up's
	// replies recorded again, a start answered with the error).
	ClaimedWithEnd   atomic.Int64
	StartedWithEnd   atomic.Int64
	TentativeDropped atomic.Int64
	// AppendsUnresolved counts the rounds of the store's timeout (10 s)
	// that ended with an append's outcome still unknown: its answer lost
	// and the log not reachable to say whether it was stored. Each is
	// also logged; the append is followed up until the log answers.
	AppendsUnresolved atomic.Int64
}

func (s *Counts) reply(r replyObservation) {
	switch r.verdict {
	case conversation.VerdictApplied.String():
		s.RepliesApplied.Add(1)
	case conversation.VerdictDuplicate.String():
		s.Duplicates.Add(1)
	case conversation.VerdictLate.String():
		s.Late.Add(1)
		s.DeadLettered.Add(1)
		if r.expired {
			s.Expired.Add(1)
		}
	case replyError:
		s.TransientErrors.Add(1)
	case conversation.VerdictElsewhere.String():
		s.DecisionsHandedOver.Add(1)
	case conversation.VerdictCounted.String():
		s.ApprovalsCounted.Add(1)
	default: // refused, invalid, unknown run
		s.Refused.Add(1)
		s.DeadLettered.Add(1)
	}
}

func (s *Counts) expired(string)          { s.Expired.Add(1) }
func (s *Counts) unservedCall(string)     { s.UnservedCalls.Add(1) }
func (s *Counts) reconcileError()         { s.ReconcileErrors.Add(1) }
func (s *Counts) runFinished(_, _ string) {}
func (s *Counts) appendUnresolved()       { s.AppendsUnresolved.Add(1) }
func (s *Counts) runStarted()             { s.RunsStarted.Add(1) }
func (s *Counts) runRelaunched()          { s.RunsRelaunched.Add(1) }
func (s *Counts) followUp()               { s.FollowUps.Add(1) }
func (s *Counts) endWritten()             { s.EndWrites.Add(1) }

func (s *Counts) storedWithEnd(start bool, n int64) {
	if start {
		s.StartedWithEnd.Add(n)
		return
	}
	s.ClaimedWithEnd.Add(n)
}

func (s *Counts) runUncounted(start bool) {
	if start {
		s.RunsStarted.Add(-1)
		return
	}
	s.FollowUps.Add(-1)
}

func (s *Counts) tentativeDropped() { s.TentativeDropped.Add(1) }

func (s *Counts) published(calls int) {
	s.Published.Add(int64(calls))
	s.CallBatches.Add(1)
}

func (s *Counts) leaseLost()        { s.LeaseLost.Add(1) }
func (s *Counts) handedOver()       { s.HandedOver.Add(1) }
func (s *Counts) reconcileStarted() { s.ReconcilesStarted.Add(1) }
func (s *Counts) reconcileEnded()   { s.ReconcilesEnded.Add(1) }

func (s *Counts) stateWritten(bytes int) {
	s.StateWrites.Add(1)
	s.StateBytes.Add(int64(bytes))
}

func (s *Counts) stateRead() { s.StateReads.Add(1) }
