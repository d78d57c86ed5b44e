package conversation

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// EffectKind says what an Effect asks for.
//
// What follows a write: a transition changes a conversation and says, as a
// list of effects, what its record asks for once it is stored: a run to
// launch, calls to withdraw, events to emit, a deadline to schedule. It
// does no I/O and reads nothing but the state and its arguments, so that a
// write retried after a conflict simply computes them again, and what is
// carried out (by the orchestrator's effector) is what the write that won asked for, once.
//
// The table of effects, in the order a transition lists them when it has
// several (docs/architecture.md draws it with the state machine):
//
//	effect            carried out as                              asked by
//	notifyCancel      a cancel notice per run (bus.PublishCancel) cancel
//	withdraw          the calls taken out of the work queue       cancel, expire, delete
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
//	purge             the log purged to its tombstone, with its due entry, then the events   delete (and a delete finished)
//	log               a line of the replica's log                 any
type EffectKind uint8

const (
	EffectNotifyCancel EffectKind = iota + 1
	EffectWithdraw
	EffectExpired
	EffectEmit
	EffectEscalate
	EffectBatchDone
	EffectClaim
	EffectSchedule
	EffectFollowUp
	EffectRelaunch
	EffectStarted
	EffectLaunch
	EffectHandOver
	EffectPublishInline
	EffectReplied
	EffectPublishDispatched
	EffectEndWritten
	EffectAudit
	EffectIndex
	EffectAwaitReplies
	EffectPublishPaused
	EffectRunEnded
	EffectLog
	EffectPurge
)

var effectNames = [...]string{
	EffectNotifyCancel: "notifyCancel", EffectWithdraw: "withdraw", EffectExpired: "expired",
	EffectEmit: "emit", EffectEscalate: "escalate", EffectBatchDone: "batchDone", EffectClaim: "claim",
	EffectSchedule: "schedule", EffectFollowUp: "followUp", EffectRelaunch: "relaunch", EffectStarted: "started", EffectLaunch: "launch", EffectHandOver: "handOver", EffectPublishInline: "publishInline", EffectReplied: "replied", EffectPublishDispatched: "publishDispatched", EffectEndWritten: "endWritten", EffectAudit: "audit", EffectIndex: "index",
	EffectAwaitReplies: "awaitReplies", EffectPublishPaused: "publishPaused", EffectRunEnded: "runEnded", EffectLog: "log",
	EffectPurge: "purge",
}

func (k EffectKind) String() string {
	if int(k) < len(effectNames) && effectNames[k] != "" {
		return effectNames[k]
	}
	return fmt.Sprintf("effect(%d)", k)
}

// Effect is one thing a stored transition asks for. Which fields it uses
// is its kind's.
type Effect struct {
	// Kind says what is asked for, and which other fields tell it.
	Kind EffectKind
	// RunID is the run the effect is about: the one launched, the batch's
	// whose calls are withdrawn or escalated, the one an event names.
	RunID string
	// Runs are the runs told to stop (EffectNotifyCancel).
	Runs []string
	// Calls are the calls withdrawn, counted as expired or escalated.
	Calls []*PendingCall
	// Event, CallID and Data are an emitted event's.
	Event  string
	CallID string
	Data   any
	// CallIDs are the calls dispatched (EffectPublishDispatched).
	CallIDs []string
	// Grants are the grants' uses audited.
	Grants []GrantUse
	// Level, Msg and Attrs are a logged line's (its conversation's id
	// added).
	Level slog.Level
	Msg   string
	Attrs []slog.Attr
	// Read launches a run from the state read afresh rather than as
	// written.
	Read bool
	// Detached carries a withdrawal out whether or not the caller still
	// waits (its context's cancellation is not the withdrawal's).
	Detached bool
}

// Transition changes c as of now and returns the effects its record asks
// for. ErrUnchanged ends it without a record; its effects are still
// carried out, since they follow from the state as it is (the next
// deadline of a batch nothing expired in, a complete batch to claim). Any
// other error ends it with nothing carried out.
type Transition func(c *State, now time.Time) ([]Effect, error)

// LogEffect asks for a line of the replica's log, at level, about the
// conversation.
func LogEffect(level slog.Level, msg string, attrs ...slog.Attr) Effect {
	return Effect{Kind: EffectLog, Level: level, Msg: msg, Attrs: attrs}
}

// EmitEffect asks for an event of the conversation: of type event, about
// run runID (and call callID, when not ""), with data.
func EmitEffect(runID, event, callID string, data any) Effect {
	return Effect{Kind: EffectEmit, RunID: runID, Event: event, CallID: callID, Data: data}
}

// CancelTransition cancels c with reason (State.Cancel): its
// working runs are told to stop, the external calls it settled withdrawn,
// and a conversation_cancelled event says which calls it settled.
func CancelTransition(reason string) Transition {
	return func(c *State, now time.Time) ([]Effect, error) {
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
		return []Effect{
			{Kind: EffectNotifyCancel, Runs: runs},
			{Kind: EffectWithdraw, RunID: batchRun, Calls: settled, Detached: true},
			LogEffect(slog.LevelInfo, "conversation cancelled", slog.Int("calls", len(ids))),
			EmitEffect(runID, wire.EventConversationCancelled, "", wire.ConversationCancelled{Reason: reason, ToolCallIDs: ids}),
		}, nil
	}
}

// ExpireTransition settles the calls past their deadline and marks the
// approvals past their escalation time (D37); whether or not it changed
// anything, the batch then moves on (SettledEffects).
func ExpireTransition() Transition {
	return func(c *State, now time.Time) ([]Effect, error) {
		escalated := c.Escalate(now)
		expired := c.Expire(now)
		var effects []Effect
		if n := len(expired); n > 0 {
			ids := make([]string, n)
			for i, pc := range expired {
				ids[i] = pc.ToolCallID
			}
			effects = append(effects,
				Effect{Kind: EffectExpired, Calls: expired},
				EmitEffect(c.Batch.RunID, wire.EventCallsExpired, "", wire.CallsExpired{Calls: n, ToolCallIDs: ids}),
				Effect{Kind: EffectWithdraw, RunID: c.Batch.RunID, Calls: expired})
		}
		var escalate []*PendingCall
		for _, pc := range escalated {
			if pc.Reply == nil {
				escalate = append(escalate, pc)
			}
		}
		if len(escalate) > 0 {
			effects = append(effects, Effect{Kind: EffectEscalate, RunID: c.Batch.RunID, Calls: escalate})
		}
		effects = appendSettled(effects, c)
		if len(expired) == 0 && len(escalated) == 0 {
			return effects, ErrUnchanged
		}
		return effects, nil
	}
}

// SettledEffects move a conversation on after calls of its batch were
// settled: a complete batch is done with and claimed for its follow-up,
// an incomplete one has its next deadline scheduled.
func SettledEffects(c *State) []Effect {
	if c.Batch == nil {
		return nil
	}
	var room [2]Effect
	return sized(appendSettled(room[:0], c))
}

// sized copies effects, listed in an array on the stack, into one of
// their number: grown one by one, a pause's list was four arrays of
// effects, a call's largest garbage of its kind.
func sized(effects []Effect) []Effect {
	if len(effects) == 0 {
		return nil
	}
	return append(make([]Effect, 0, len(effects)), effects...)
}

// appendSettled appends SettledEffects(c) to effects.
func appendSettled(effects []Effect, c *State) []Effect {
	switch {
	case c.Batch == nil:
		return effects
	case c.claimable():
		return append(effects, Effect{Kind: EffectBatchDone, RunID: c.Batch.RunID}, Effect{Kind: EffectClaim})
	}
	return append(effects, Effect{Kind: EffectSchedule})
}

// Claimer is what a claim takes besides the state: who claims, the id of
// a follow-up no prompt named, and the lease's length, 0 for a
// conversation this replica does not run (claimed with its lease expired,
// so that a replica of its agent takes it over).
type Claimer struct {
	// Owner is the replica that takes the follow-up's lease.
	Owner string
	// NewRunID makes the id of c's follow-up run.
	NewRunID func(c *State) string
	// TTL is the length of the lease on c's follow-up.
	TTL func(c *State) time.Duration
}

// ClaimIn makes the claim in c if its batch is complete and unclaimed, and
// returns the follow-up run id; "" leaves c as it was. The write of c is
// what makes the claim exactly-once (D35).
func (cl Claimer) ClaimIn(c *State, now time.Time) string {
	if !c.claimable() {
		return ""
	}
	followUp := c.Batch.PromptRunID
	if followUp == "" {
		followUp = cl.NewRunID(c)
	}
	if !c.Claim(cl.Owner, followUp, now, cl.TTL(c)) {
		return ""
	}
	return followUp
}

// ClaimTransition claims a complete batch for its follow-up, which is
// then launched (or handed over).
func ClaimTransition(cl Claimer) Transition {
	return func(c *State, now time.Time) ([]Effect, error) {
		followUp := cl.ClaimIn(c, now)
		if followUp == "" {
			return nil, ErrUnchanged
		}
		return []Effect{{Kind: EffectFollowUp, RunID: followUp}}, nil
	}
}

// TakeOverTransition takes over the run of a running or resuming
// conversation whose lease expired (State.TakeOver), when mine says
// this replica may run it, and relaunches it here.
func TakeOverTransition(owner string, ttl time.Duration, mine func(*State) bool) Transition {
	return func(c *State, now time.Time) ([]Effect, error) {
		if (c.Status == StatusRunning || c.Status == StatusResuming) && !c.LeaseLive(now) && !mine(c) {
			// Another agent's (or another config's): left to its replicas.
			return nil, ErrUnchanged
		}
		runID, failed := c.TakeOver(owner, now, ttl)
		switch {
		case runID != "":
			return []Effect{{Kind: EffectRelaunch, RunID: runID}}, nil
		case failed:
			return nil, nil
		}
		return nil, ErrUnchanged
	}
}

// AbortTransition fails a conversation that cannot go on (State.Abort)
// with reason, and says so in a run_failed event. A conversation failed
// with that reason already says it again.
func AbortTransition(reason string) Transition {
	return func(c *State, now time.Time) ([]Effect, error) {
		runID := ""
		if c.Lease != nil {
			runID = c.Lease.RunID
		} else if c.Batch != nil {
			runID = c.Batch.RunID
		}
		var err error
		if !c.Abort(reason, now) {
			err = ErrUnchanged
		}
		if c.Status != StatusFailed || c.Error != reason {
			return nil, err
		}
		return []Effect{LogEffect(slog.LevelWarn, "conversation failed: state too large", slog.String("error", reason)),
			EmitEffect(runID, wire.EventRunFailed, "", wire.RunFailed{Error: reason})}, err
	}
}

// WaitForAgentTransition notes that no replica runs c's agent, and fails
// c once it waited wait for one (State.WaitForAgent); each says so
// in an event.
func WaitForAgentTransition(reason string, wait time.Duration) Transition {
	return func(c *State, now time.Time) ([]Effect, error) {
		leaseRun := ""
		if c.Lease != nil {
			leaseRun = c.Lease.RunID
		}
		noted, failed, runID := c.WaitForAgent(reason, now, wait)
		switch {
		case noted:
			return []Effect{LogEffect(slog.LevelWarn, "conversation waits for a replica of its agent",
				slog.String("agent", c.Agent), slog.String("agent_digest", shortDigest(c.AgentDigest)), slog.Duration("fails_after", wait)),
				EmitEffect(leaseRun, wire.EventAgentUnavailable, "", wire.AgentUnavailable{
					Agent: c.Agent, AgentDigest: c.AgentDigest, Reason: reason, FailsAt: now.Add(wait)})}, nil
		case failed:
			return []Effect{LogEffect(slog.LevelWarn, "conversation failed: no replica of its agent came", slog.String("agent", c.Agent)),
				EmitEffect(runID, wire.EventRunFailed, "", wire.RunFailed{Error: reason})}, nil
		}
		return nil, ErrUnchanged
	}
}

// EndedEffects are what the record that ended run runID of c asks for, c
// as it left it, granted the calls grants decided in it: the write
// counted, the grants' uses audited, an event of how it ended; a pause
// is indexed at once when it awaits a person, its batch's deadline
// scheduled (or, complete already, its follow-up claimed) before the calls
// go out, off the run's way, and OnRunEnd told once they are.
func EndedEffects(c *State, runID string, granted []GrantUse) []Effect {
	var room [8]Effect
	return sized(appendEnded(room[:0], c, runID, granted))
}

// appendEnded appends EndedEffects(c, runID, granted) to effects.
func appendEnded(effects []Effect, c *State, runID string, granted []GrantUse) []Effect {
	if c.Status.Terminal() {
		effects = append(effects, Effect{Kind: EffectEndWritten})
	}
	if len(granted) > 0 {
		effects = append(effects, Effect{Kind: EffectAudit, RunID: runID, Grants: granted})
	}
	run := slog.String("run_id", runID)
	switch c.Status {
	case StatusFailed:
		return append(effects,
			LogEffect(slog.LevelWarn, "run failed", run, slog.String("error", c.Error)),
			EmitEffect(runID, wire.EventRunFailed, "", wire.RunFailed{Error: c.Error}),
			Effect{Kind: EffectRunEnded})
	case StatusCompleted:
		return append(effects,
			LogEffect(slog.LevelInfo, "run completed", run),
			EmitEffect(runID, wire.EventRunCompleted, "", wire.RunCompleted{Output: c.Output}),
			Effect{Kind: EffectRunEnded})
	case StatusPaused:
		effects = append(effects, LogEffect(slog.LevelInfo, "run paused", run, slog.Int("calls", len(c.Batch.Calls))))
		approval := c.Batch.awaitsApproval()
		if approval {
			// Listed pending by every replica before anyone is asked.
			effects = append(effects, Effect{Kind: EffectIndex})
		}
		effects = append(effects, EmitEffect(runID, wire.EventRunPaused, "", c.PendingCalls()))
		if !approval {
			effects = append(effects, Effect{Kind: EffectAwaitReplies})
		}
		// Before the calls go out: the batch's deadline is then scheduled
		// before a reply can complete the batch and take it out again;
		// scheduled after, a batch answered at once kept its entry until
		// the deadline.
		effects = appendSettled(effects, c)
		return append(effects, Effect{Kind: EffectPublishPaused, RunID: runID})
	}
	return append(effects, Effect{Kind: EffectRunEnded})
}

// StartedEffects are what the record that starts run runID of c asks for:
// the run counted, and executed here from the state written, or, when this
// replica does not run c's agent (here false; the lease was written
// expired), handed over to the agent's replicas.
func StartedEffects(runID string, here bool) []Effect {
	if !here {
		return []Effect{{Kind: EffectStarted}, {Kind: EffectHandOver}}
	}
	return []Effect{{Kind: EffectStarted}, {Kind: EffectLaunch, RunID: runID}}
}

// InlineEffects are what the record of the batch run runID defers into its
// inline wait asks for, granted the calls grants decided in it: the
// grants' uses audited, the batch's deadline scheduled and its calls
// published at once.
func InlineEffects(runID string, granted []GrantUse) []Effect {
	var effects []Effect
	if len(granted) > 0 {
		effects = append(effects, Effect{Kind: EffectAudit, RunID: runID, Grants: granted})
	}
	return append(effects, Effect{Kind: EffectSchedule}, Effect{Kind: EffectPublishInline, RunID: runID})
}

// RepliedEffects are what the record of replies to c's batch asks for:
// each reply's events and its delivery answered (by whoever recorded
// them); then the follow-up the record claimed, launched (or handed over),
// or else the batch's next deadline scheduled and the calls ids the
// replies approved and dispatched sent to their workers.
func RepliedEffects(c *State, ids []string, followUp string) []Effect {
	effects := []Effect{{Kind: EffectReplied}}
	if followUp != "" {
		return append(effects, Effect{Kind: EffectBatchDone, RunID: c.Batch.RunID}, Effect{Kind: EffectFollowUp, RunID: followUp})
	}
	effects = append(effects, Effect{Kind: EffectSchedule})
	if len(ids) > 0 {
		effects = append(effects, Effect{Kind: EffectPublishDispatched, CallIDs: ids})
	}
	return effects
}

// RenewTransition extends owner's lease on run runID to ttl from now
// (State.Renew). It asks for nothing; a lease lost is its error.
func RenewTransition(owner, runID string, ttl time.Duration) Transition {
	return func(c *State, now time.Time) ([]Effect, error) {
		return nil, c.Renew(owner, runID, now.Add(ttl))
	}
}

// ReleaseTransition lets owner's lease on run runID expire now, so that a
// replica relaunches the run at once (State.Release).
func ReleaseTransition(owner, runID string) Transition {
	return func(c *State, _ time.Time) ([]Effect, error) {
		if !c.Release(owner, runID) {
			return nil, ErrUnchanged
		}
		return nil, nil
	}
}

// MarkPublishedTransition records that the calls ids of run runID's batch
// were published at, or before, at (State.MarkPublished).
func MarkPublishedTransition(runID string, ids []string, at time.Time) Transition {
	return func(c *State, _ time.Time) ([]Effect, error) {
		if !c.MarkPublished(runID, ids, at) {
			return nil, ErrUnchanged
		}
		return nil, nil
	}
}

// DeleteTransition deletes a finished conversation (State.Delete), whose
// record is its tombstone: the calls of its batch no worker answered are
// withdrawn (a worker that came later would run them for nothing), the
// conversation purged (PurgeEffects), and the deletion logged. One under
// way refuses it (*ConflictError).
func DeleteTransition() Transition {
	return func(c *State, now time.Time) ([]Effect, error) {
		if err := c.Delete(now); err != nil {
			return nil, err
		}
		var effects []Effect
		if b := c.Batch; b != nil {
			var calls []*PendingCall
			for _, pc := range b.Calls {
				if pc.Reply == nil || pc.Reply.Cancelled || pc.Reply.Expired {
					calls = append(calls, pc)
				}
			}
			if len(calls) > 0 {
				effects = append(effects, Effect{Kind: EffectWithdraw, RunID: b.RunID, Calls: calls})
			}
		}
		effects = append(effects, PurgeEffects()...)
		return append(effects, LogEffect(slog.LevelInfo, "conversation deleted")), nil
	}
}

// PurgeEffects are what a stored tombstone asks for: the conversation's
// log purged but the tombstone (which tells the replicas that still cache
// it that it is gone), its due entry, then its events, which hold its
// history too. A purge that fails stops what follows it; a delete of the
// deleted conversation asks for them again, which finishes a delete that
// stopped after its tombstone.
func PurgeEffects() []Effect { return []Effect{{Kind: EffectPurge}} }

// GrantUse is a call a grant decided or, when Ignored is set, a grant
// covering the call that its agent's policy refused, and why: what the
// audit of a grant's use records (EffectAudit).
type GrantUse struct {
	// CallID, Tool and ArgsDigest are the call's.
	CallID, Tool, ArgsDigest string
	// GrantID, Approved, Signed and Message are the grant's.
	GrantID  string
	Approved bool
	Signed   bool
	Message  string
	// Ignored says why the grant did not decide the call; "" when it did.
	Ignored string
}
