package orchestrator

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// What follows a write. A transition changes a conversation and says, as a
// list of effects, what its record asks for once it is stored: a run to
// launch, calls to withdraw, events to emit, a deadline to schedule. It
// does no I/O and reads nothing but the state and its arguments, so that a
// write retried after a conflict simply computes them again, and what is
// carried out (effector.go) is what the write that won asked for, once.
//
// The table of effects, in the order a transition lists them when it has
// several (docs/architecture.md draws it with the state machine):
//
//	effect            carried out as                              asked by
//	notifyCancel      a cancel notice per run (bus.PublishCancel) cancel
//	withdraw          the calls taken out of the work queue       cancel, expire
//	expired           the expiries counted and logged             expire
//	emit              one event of the conversation               cancel, expire, fail, wait for agent
//	escalate          the approval handed to EscalateTo           expire
//	batchDone         the batch's deadline and marks forgotten    expire (complete), claim
//	claim             the claim written, a transition of its own  expire (complete)
//	schedule          the batch's next deadline scheduled         expire (incomplete)
//	followUp          the claimed follow-up launched, or handed over when its lease is not live
//	relaunch          the run taken over launched here            take over
//	started           counted: a run started                      start, new prompt
//	launch            the run executed here from the written state start, new prompt
//	handOver          the agent's replicas nudged to take the run start, new prompt (not this replica's agent)
//	publishInline     the batch published at once                 inline wait begun
//	replied           each reply's events, then its delivery answered  replies recorded
//	publishDispatched the approved calls sent to their workers, off the way  replies recorded (a call dispatched)
//	endWritten        counted: a write that ended a run           end of a run (finished)
//	audit             the grants' uses recorded on the audit stream end of a run
//	index             the due entry put now                       end of a run (awaits approval)
//	awaitReplies      the event sink waits for the replies        end of a run (paused, no approval)
//	publishPaused     the batch published off the way, then OnRunEnd told   end of a run (paused)
//	runEnded          OnRunEnd told                               end of a run (finished)
//	log               a line of the replica's log                 any
type effectKind uint8

const (
	effectNotifyCancel effectKind = iota + 1
	effectWithdraw
	effectExpired
	effectEmit
	effectEscalate
	effectBatchDone
	effectClaim
	effectSchedule
	effectFollowUp
	effectRelaunch
	effectStarted
	effectLaunch
	effectHandOver
	effectPublishInline
	effectReplied
	effectPublishDispatched
	effectEndWritten
	effectAudit
	effectIndex
	effectAwaitReplies
	effectPublishPaused
	effectRunEnded
	effectLog
)

var effectNames = [...]string{
	effectNotifyCancel: "notifyCancel", effectWithdraw: "withdraw", effectExpired: "expired",
	effectEmit: "emit", effectEscalate: "escalate", effectBatchDone: "batchDone", effectClaim: "claim",
	effectSchedule: "schedule", effectFollowUp: "followUp", effectRelaunch: "relaunch", effectStarted: "started", effectLaunch: "launch", effectHandOver: "handOver", effectPublishInline: "publishInline", effectReplied: "replied", effectPublishDispatched: "publishDispatched", effectEndWritten: "endWritten", effectAudit: "audit", effectIndex: "index",
	effectAwaitReplies: "awaitReplies", effectPublishPaused: "publishPaused", effectRunEnded: "runEnded", effectLog: "log",
}

func (k effectKind) String() string {
	if int(k) < len(effectNames) && effectNames[k] != "" {
		return effectNames[k]
	}
	return fmt.Sprintf("effect(%d)", k)
}

// effect is one thing a stored transition asks for. Which fields it uses
// is its kind's.
type effect struct {
	kind effectKind
	// runID is the run the effect is about: the one launched, the batch's
	// whose calls are withdrawn or escalated, the one an event names.
	runID string
	// runs are the runs told to stop (notifyCancel).
	runs []string
	// calls are the calls withdrawn, counted as expired or escalated.
	calls []*PendingCall
	// event, callID and data are an emitted event's.
	event  string
	callID string
	data   any
	// jobs are the replies recorded (replied).
	jobs []*replyJob
	// callIDs are the calls dispatched (publishDispatched).
	callIDs []string
	// grants are the grants' uses audited.
	grants []grantUse
	// level, msg and attrs are a logged line's (its conversation's id
	// added).
	level slog.Level
	msg   string
	attrs []slog.Attr
	// read launches a run from the state read afresh rather than as
	// written.
	read bool
	// detached carries a withdrawal out whether or not the caller still
	// waits (its context's cancellation is not the withdrawal's).
	detached bool
}

// transition changes c as of now and returns the effects its record asks
// for. errUnchanged ends it without a record; its effects are still
// carried out, since they follow from the state as it is (the next
// deadline of a batch nothing expired in, a complete batch to claim). Any
// other error ends it with nothing carried out.
type transition func(c *Conversation, now time.Time) ([]effect, error)

func logEffect(level slog.Level, msg string, attrs ...slog.Attr) effect {
	return effect{kind: effectLog, level: level, msg: msg, attrs: attrs}
}

func emitEffect(runID, event, callID string, data any) effect {
	return effect{kind: effectEmit, runID: runID, event: event, callID: callID, data: data}
}

// cancelTransition cancels c with reason (Conversation.Cancel): its
// working runs are told to stop, the external calls it settled withdrawn,
// and a conversation_cancelled event says which calls it settled.
func cancelTransition(reason string) transition {
	return func(c *Conversation, now time.Time) ([]effect, error) {
		runs := c.workingRuns()
		batchRun := ""
		if c.Batch != nil {
			batchRun = c.Batch.RunID
		}
		settled, err := c.Cancel(reason, now)
		if err != nil {
			return nil, err
		}
		ids := make([]string, len(settled))
		for i, pc := range settled {
			ids[i] = pc.ToolCallID
		}
		runID := ""
		if len(runs) > 0 {
			runID = runs[0]
		}
		return []effect{
			{kind: effectNotifyCancel, runs: runs},
			{kind: effectWithdraw, runID: batchRun, calls: settled, detached: true},
			logEffect(slog.LevelInfo, "conversation cancelled", slog.Int("calls", len(ids))),
			emitEffect(runID, EventConversationCancelled, "", wire.ConversationCancelled{Reason: reason, ToolCallIDs: ids}),
		}, nil
	}
}

// expireTransition settles the calls past their deadline and marks the
// approvals past their escalation time (D37); whether or not it changed
// anything, the batch then moves on (settledEffects).
func expireTransition() transition {
	return func(c *Conversation, now time.Time) ([]effect, error) {
		escalated := c.Escalate(now)
		expired := c.Expire(now)
		var effects []effect
		if n := len(expired); n > 0 {
			ids := make([]string, n)
			for i, pc := range expired {
				ids[i] = pc.ToolCallID
			}
			effects = append(effects,
				effect{kind: effectExpired, calls: expired},
				emitEffect(c.Batch.RunID, EventCallsExpired, "", wire.CallsExpired{Calls: n, ToolCallIDs: ids}),
				effect{kind: effectWithdraw, runID: c.Batch.RunID, calls: expired})
		}
		var escalate []*PendingCall
		for _, pc := range escalated {
			if pc.Reply == nil {
				escalate = append(escalate, pc)
			}
		}
		if len(escalate) > 0 {
			effects = append(effects, effect{kind: effectEscalate, runID: c.Batch.RunID, calls: escalate})
		}
		effects = append(effects, settledEffects(c)...)
		if len(expired) == 0 && len(escalated) == 0 {
			return effects, errUnchanged
		}
		return effects, nil
	}
}

// settledEffects move a conversation on after calls of its batch were
// settled: a complete batch is done with and claimed for its follow-up,
// an incomplete one has its next deadline scheduled.
func settledEffects(c *Conversation) []effect {
	if c.Batch == nil {
		return nil
	}
	if c.claimable() {
		return []effect{{kind: effectBatchDone, runID: c.Batch.RunID}, {kind: effectClaim}}
	}
	return []effect{{kind: effectSchedule}}
}

// claimer is what a claim takes besides the state: who claims, the id of
// a follow-up no prompt named, and the lease's length, 0 for a
// conversation this replica does not run (claimed with its lease expired,
// so that a replica of its agent takes it over).
type claimer struct {
	owner string
	newID func() string
	// runID, when set, makes the follow-up's whole id (in a reply
	// partition of the replica that will run it) instead of newID.
	runID func(c *Conversation) string
	ttl   func(*Conversation) time.Duration
}

// claimIn makes the claim in c if its batch is complete and unclaimed, and
// returns the follow-up run id; "" leaves c as it was. The write of c is
// what makes the claim exactly-once (D35).
func (cl claimer) claimIn(c *Conversation, now time.Time) string {
	if !c.claimable() {
		return ""
	}
	followUp := c.Batch.PromptRunID
	if followUp == "" && cl.runID != nil {
		followUp = cl.runID(c)
	} else if followUp == "" {
		followUp = runIDFor(cl.newID(), c.ID)
	}
	if !c.Claim(cl.owner, followUp, now, cl.ttl(c)) {
		return ""
	}
	return followUp
}

// claimTransition claims a complete batch for its follow-up, which is
// then launched (or handed over).
func claimTransition(cl claimer) transition {
	return func(c *Conversation, now time.Time) ([]effect, error) {
		followUp := cl.claimIn(c, now)
		if followUp == "" {
			return nil, errUnchanged
		}
		return []effect{{kind: effectFollowUp, runID: followUp}}, nil
	}
}

// takeOverTransition takes over the run of a running or resuming
// conversation whose lease expired (Conversation.TakeOver), when mine says
// this replica may run it, and relaunches it here.
func takeOverTransition(owner string, ttl time.Duration, mine func(*Conversation) bool) transition {
	return func(c *Conversation, now time.Time) ([]effect, error) {
		if (c.Status == StatusRunning || c.Status == StatusResuming) && !c.leaseLive(now) && !mine(c) {
			// Another agent's (or another config's): left to its replicas.
			return nil, errUnchanged
		}
		runID, failed := c.TakeOver(owner, now, ttl)
		switch {
		case runID != "":
			return []effect{{kind: effectRelaunch, runID: runID}}, nil
		case failed:
			return nil, nil
		}
		return nil, errUnchanged
	}
}

// abortTransition fails a conversation that cannot go on (Conversation.Abort)
// with reason, and says so in a run_failed event. A conversation failed
// with that reason already says it again.
func abortTransition(reason string) transition {
	return func(c *Conversation, now time.Time) ([]effect, error) {
		runID := ""
		if c.Lease != nil {
			runID = c.Lease.RunID
		} else if c.Batch != nil {
			runID = c.Batch.RunID
		}
		var err error
		if !c.Abort(reason, now) {
			err = errUnchanged
		}
		if c.Status != StatusFailed || c.Error != reason {
			return nil, err
		}
		return []effect{logEffect(slog.LevelWarn, "conversation failed: state too large", slog.String("error", reason)),
			emitEffect(runID, EventRunFailed, "", wire.RunFailed{Error: reason})}, err
	}
}

// waitForAgentTransition notes that no replica runs c's agent, and fails
// c once it waited wait for one (Conversation.WaitForAgent); each says so
// in an event.
func waitForAgentTransition(reason string, wait time.Duration) transition {
	return func(c *Conversation, now time.Time) ([]effect, error) {
		leaseRun := ""
		if c.Lease != nil {
			leaseRun = c.Lease.RunID
		}
		noted, failed, runID := c.WaitForAgent(reason, now, wait)
		switch {
		case noted:
			return []effect{logEffect(slog.LevelWarn, "conversation waits for a replica of its agent",
				slog.String("agent", c.Agent), slog.String("agent_digest", ShortDigest(c.AgentDigest)), slog.Duration("fails_after", wait)),
				emitEffect(leaseRun, EventAgentUnavailable, "", wire.AgentUnavailable{
					Agent: c.Agent, AgentDigest: c.AgentDigest, Reason: reason, FailsAt: now.Add(wait)})}, nil
		case failed:
			return []effect{logEffect(slog.LevelWarn, "conversation failed: no replica of its agent came", slog.String("agent", c.Agent)),
				emitEffect(runID, EventRunFailed, "", wire.RunFailed{Error: reason})}, nil
		}
		return nil, errUnchanged
	}
}

// endedEffects are what the record that ended run runID of c asks for, c
// as it left it, granted the calls grants decided in it: the write
// counted, the grants' uses audited, an event of how it ended; a pause
// is indexed at once when it awaits a person, its batch's deadline
// scheduled (or, complete already, its follow-up claimed) before the calls
// go out, off the run's way, and OnRunEnd told once they are.
func endedEffects(c *Conversation, runID string, granted []grantUse) []effect {
	var effects []effect
	if c.Status.Terminal() {
		effects = append(effects, effect{kind: effectEndWritten})
	}
	if len(granted) > 0 {
		effects = append(effects, effect{kind: effectAudit, runID: runID, grants: granted})
	}
	run := slog.String("run_id", runID)
	switch c.Status {
	case StatusFailed:
		return append(effects,
			logEffect(slog.LevelWarn, "run failed", run, slog.String("error", c.Error)),
			emitEffect(runID, EventRunFailed, "", wire.RunFailed{Error: c.Error}),
			effect{kind: effectRunEnded})
	case StatusCompleted:
		return append(effects,
			logEffect(slog.LevelInfo, "run completed", run),
			emitEffect(runID, EventRunCompleted, "", wire.RunCompleted{Output: c.Output}),
			effect{kind: effectRunEnded})
	case StatusPaused:
		effects = append(effects, logEffect(slog.LevelInfo, "run paused", run, slog.Int("calls", len(c.Batch.Calls))))
		approval := c.Batch.awaitsApproval()
		if approval {
			// Listed pending by every replica before anyone is asked.
			effects = append(effects, effect{kind: effectIndex})
		}
		effects = append(effects, emitEffect(runID, EventRunPaused, "", c.PendingCalls()))
		if !approval {
			effects = append(effects, effect{kind: effectAwaitReplies})
		}
		// Before the calls go out: the batch's deadline is then scheduled
		// before a reply can complete the batch and take it out again;
		// scheduled after, a batch answered at once kept its entry until
		// the deadline.
		effects = append(effects, settledEffects(c)...)
		return append(effects, effect{kind: effectPublishPaused, runID: runID})
	}
	return append(effects, effect{kind: effectRunEnded})
}

// startedEffects are what the record that starts run runID of c asks for:
// the run counted, and executed here from the state written, or, when this
// replica does not run c's agent (here false; the lease was written
// expired), handed over to the agent's replicas.
func startedEffects(runID string, here bool) []effect {
	if !here {
		return []effect{{kind: effectStarted}, {kind: effectHandOver}}
	}
	return []effect{{kind: effectStarted}, {kind: effectLaunch, runID: runID}}
}

// inlineEffects are what the record of the batch run runID defers into its
// inline wait asks for, granted the calls grants decided in it: the
// grants' uses audited, the batch's deadline scheduled and its calls
// published at once.
func inlineEffects(runID string, granted []grantUse) []effect {
	var effects []effect
	if len(granted) > 0 {
		effects = append(effects, effect{kind: effectAudit, runID: runID, grants: granted})
	}
	return append(effects, effect{kind: effectSchedule}, effect{kind: effectPublishInline, runID: runID})
}

// repliedEffects are what the record of the replies jobs (their verdicts
// given in c) asks for: each reply's events and its delivery answered;
// then the follow-up the record claimed, launched (or handed over), or
// else the batch's next deadline scheduled and the calls the replies
// approved and dispatched sent to their workers.
func repliedEffects(c *Conversation, jobs []*replyJob, followUp string) []effect {
	effects := []effect{{kind: effectReplied, jobs: jobs}}
	if followUp != "" {
		return append(effects, effect{kind: effectBatchDone, runID: c.Batch.RunID}, effect{kind: effectFollowUp, runID: followUp})
	}
	var ids []string
	for _, j := range jobs {
		if j.dispatched != nil {
			ids = append(ids, j.in.callID)
		}
	}
	effects = append(effects, effect{kind: effectSchedule})
	if len(ids) > 0 {
		effects = append(effects, effect{kind: effectPublishDispatched, callIDs: ids})
	}
	return effects
}

// renewTransition extends owner's lease on run runID to ttl from now
// (Conversation.Renew). It asks for nothing; a lease lost is its error.
func renewTransition(owner, runID string, ttl time.Duration) transition {
	return func(c *Conversation, now time.Time) ([]effect, error) {
		return nil, c.Renew(owner, runID, now.Add(ttl))
	}
}

// releaseTransition lets owner's lease on run runID expire now, so that a
// replica relaunches the run at once (Conversation.Release).
func releaseTransition(owner, runID string) transition {
	return func(c *Conversation, _ time.Time) ([]effect, error) {
		if !c.Release(owner, runID) {
			return nil, errUnchanged
		}
		return nil, nil
	}
}

// markPublishedTransition records that the calls ids of run runID's batch
// were published at, or before, at (Conversation.MarkPublished).
func markPublishedTransition(runID string, ids []string, at time.Time) transition {
	return func(c *Conversation, _ time.Time) ([]effect, error) {
		if !c.MarkPublished(runID, ids, at) {
			return nil, errUnchanged
		}
		return nil, nil
	}
}
