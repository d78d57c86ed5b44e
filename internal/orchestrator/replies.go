package orchestrator

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// replyTimeout bounds the handling of one reply (KV reads and CAS writes).
const replyTimeout = 30 * time.Second

// verdict is what became of a reply.
type verdict int

const (
	verdictApplied   verdict = iota // recorded as the call's answer
	verdictDuplicate                // the call was already answered; acked
	verdictRefused                  // not acceptable; recorded, dead-lettered
	verdictLate                     // past the call's deadline; recorded, dead-lettered
)

func (v verdict) String() string {
	return [...]string{"applied", "duplicate", "refused", "late"}[v]
}

// incoming is a decoded reply: a decision or a result.
type incoming struct {
	runID    string
	callID   string
	kind     deferred.Kind // the category the reply subject claims
	decision *bus.Decision
	result   *bus.CallReply
	// trustErr is why the decision's signer is not trusted; nil if it is or
	// no keys are configured.
	trustErr error
	// trace is the context of the span that consumes the reply, kept with
	// the applied reply for the follow-up it may complete.
	trace map[string]string
	// oversize is the size of a result over bus.MaxReplyBytes, which
	// result replaces with a failed one saying so.
	oversize int
}

// replyConcurrency is the number of replies handled at once, each by its
// own handler (bus.ConsumeConfig.Dispatch): a handler waits while its
// conversation's group is written, so many replies must be in hand at once
// for the groups to be large. Replies of one conversation handled at the
// same time are recorded by one CAS (see replyGroups).
const replyConcurrency = 256

// replyPrefetch is the pull batch of each dispatch loop.
const replyPrefetch = 64

func (o *Orchestrator) consumeReplies(ctx context.Context) error {
	sub, err := o.bus.ConsumeReplies(ctx, o.cfg.ReplyConsumer, bus.ConsumeConfig{
		AckWait:         o.cfg.ReplyAckWait,
		MaxDeliver:      20,
		BackOff:         []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second},
		Concurrency:     replyConcurrency,
		Dispatch:        true,
		PullMaxMessages: replyPrefetch,
	}, bus.HandlerFunc[bus.Reply](o.handleReply))
	if err != nil {
		return err
	}
	o.replies = sub
	return nil
}

// replyJob is one reply waiting to be recorded, and then what became of it.
type replyJob struct {
	in   incoming
	done chan struct{}
	// seq is the reply's stream sequence: a group applies its replies in
	// the order they were stored, so that of two answers to one call the
	// first stored wins, whichever handler joined first.
	seq uint64

	v      verdict
	reason string
	err    error
	// Of the call the reply answers, when the run's batch has it: its tool,
	// when it was published, and whether this reply found it past its
	// deadline and settled it as expired.
	tool        string
	publishedAt time.Time
	at          time.Time
	expired     bool
}

// replyGroups gathers the replies being handled per conversation. The
// handler that finds no group for its conversation leads: it records every
// reply that has joined in one CAS, then those that joined meanwhile, until
// none is left. Others wait for their verdict. A batch of n replies thus
// costs far fewer than n rewrites of the conversation, and each reply is
// still acked only once its effect is in KV.
type replyGroups struct {
	mu sync.Mutex
	m  map[string]*replyGroup
}

type replyGroup struct {
	jobs []*replyJob
	// joined is signalled (without blocking) when a job joins.
	joined chan struct{}
}

// join adds j to its conversation's group and reports whether the caller
// leads it.
func (g *replyGroups) join(convID string, j *replyJob) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.m == nil {
		g.m = map[string]*replyGroup{}
	}
	grp, ok := g.m[convID]
	if !ok {
		grp = &replyGroup{joined: make(chan struct{}, 1)}
		g.m[convID] = grp
	}
	grp.jobs = append(grp.jobs, j)
	select {
	case grp.joined <- struct{}{}:
	default:
	}
	return !ok
}

// take removes the jobs waiting for convID; when there are none it ends the
// group, and the next reply leads a new one.
func (g *replyGroups) take(convID string) []*replyJob {
	g.mu.Lock()
	defer g.mu.Unlock()
	grp := g.m[convID]
	if grp == nil || len(grp.jobs) == 0 {
		delete(g.m, convID)
		return nil
	}
	jobs := grp.jobs
	grp.jobs = nil
	return jobs
}

// more removes the jobs that joined convID's group since the last take,
// keeping the group open, and returns the channel signalled at the next
// join.
func (g *replyGroups) more(convID string) ([]*replyJob, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	grp := g.m[convID]
	if grp == nil {
		return nil, nil
	}
	jobs := grp.jobs
	grp.jobs = nil
	return jobs, grp.joined
}

// Replies that leave their batch incomplete change nothing anyone waits
// for but the record: their group lingers up to Config.ReplyLinger for more
// replies, so that a large batch is recorded in a few rewrites of the
// conversation instead of one per handful of replies. The reply that
// completes the batch ends the wait at once: the follow-up is never held
// back by it. A group stops gathering at replyLingerMax jobs, so that
// lingering groups never hold every handler.
const (
	replyLinger    = 5 * time.Millisecond
	replyLingerMax = replyConcurrency / 4
)

// linger gathers more jobs for convID's group while they leave its batch
// (as c, the stored state, has it) incomplete, for up to ReplyLinger.
func (o *Orchestrator) linger(ctx context.Context, convID string, c *Conversation, jobs []*replyJob) []*replyJob {
	if o.cfg.ReplyLinger < 0 || c == nil || c.Batch == nil || c.Batch.Inline {
		return jobs
	}
	var timer *time.Timer
	for len(jobs) < replyLingerMax && !completes(c.Batch, jobs) {
		more, joined := o.replyGroups.more(convID)
		jobs = append(jobs, more...)
		if len(more) > 0 {
			continue
		}
		if timer == nil {
			timer = time.NewTimer(o.cfg.ReplyLinger)
			defer timer.Stop()
		}
		select {
		case <-joined:
		case <-timer.C:
			return jobs
		case <-ctx.Done():
			return jobs
		}
	}
	return jobs
}

// completes reports whether the jobs answer every call of b still pending,
// or cannot be told to leave it incomplete (a reply to another run).
func completes(b *Batch, jobs []*replyJob) bool {
	pending := 0
	for _, pc := range b.Calls {
		if pc.Reply == nil {
			pending++
		}
	}
	answered := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		if j.in.runID != b.RunID {
			return true
		}
		if pc := b.call(j.in.callID); pc != nil && pc.Reply == nil {
			answered[pc.ToolCallID] = true
		}
	}
	return len(answered) >= pending
}

// handleReply ends every reply explicitly: acked once its effect is in KV
// (or it is a harmless duplicate), nakked with a delay on a transient
// failure (a plain error), dead-lettered and terminated when it is refused
// (a bus.Terminal error).
func (o *Orchestrator) handleReply(ctx context.Context, d *bus.Delivery[bus.Reply]) (herr error) {
	ctx, cancel := context.WithTimeout(ctx, replyTimeout)
	defer cancel()
	m := o.cfg.Metrics
	kind := d.Msg.Kind
	ctx, span := telemetry.StartConsumer(ctx, o.tracer, "process toolgate.reply."+kind, d.Subject, d.Header,
		telemetry.AttrRunID.String(d.Msg.RunID), telemetry.AttrToolCallID.String(d.Msg.ToolCallID()),
		telemetry.AttrKind.String(kind), telemetry.AttrDelivered.Int64(int64(d.NumDelivered)))
	verdictLabel, tool := "", ""
	defer func() {
		span.SetAttributes(attribute.String("toolgate.verdict", verdictLabel))
		if herr != nil {
			span.SetStatus(codes.Error, verdictLabel)
		}
		span.End()
		if d.NumDelivered > 1 {
			m.Redelivered(tool)
		}
	}()
	in, err := incomingOf(d.Msg)
	if err != nil {
		o.stats.Refused.Add(1)
		o.stats.DeadLettered.Add(1)
		verdictLabel = replyInvalid
		m.Reply(kind, verdictLabel)
		m.DeadLetter(verdictLabel)
		return bus.Terminal(err)
	}
	if in.oversize > 0 {
		o.log.WarnContext(ctx, "result too large; taking it as failed", slog.String("run_id", in.runID),
			slog.String("tool_call_id", in.callID), slog.Int("bytes", in.oversize), slog.Int("limit", bus.MaxReplyBytes))
	}
	in.trustErr = o.checkTrust(in)
	in.trace = telemetry.InjectMap(ctx)
	unknownRun := func() error {
		o.stats.Refused.Add(1)
		o.stats.DeadLettered.Add(1)
		verdictLabel = replyUnknownRun
		m.Reply(kind, verdictLabel)
		m.DeadLetter(verdictLabel)
		o.replyLog(in, "").WarnContext(ctx, "reply refused: unknown run")
		o.audit(ctx, "", d, &replyJob{in: in, v: verdictRefused, reason: "unknown run " + in.runID})
		return bus.Terminal(fmt.Errorf("unknown run %s", in.runID))
	}
	convID, err := o.store.conversationOf(ctx, in.runID)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return unknownRun()
		}
		o.stats.TransientErrors.Add(1)
		verdictLabel = replyError
		m.Reply(kind, verdictLabel)
		return err
	}
	span.SetAttributes(telemetry.AttrConversationID.String(convID))
	j := &replyJob{in: in, done: make(chan struct{}), seq: d.StreamSeq}
	if o.replyGroups.join(convID, j) {
		// Each round starts from the state the last one wrote, saving a
		// read while no one else wrote meanwhile.
		var (
			c   *Conversation
			rev uint64
		)
		for jobs := o.replyGroups.take(convID); jobs != nil; jobs = o.replyGroups.take(convID) {
			if c == nil {
				// Read now rather than in the CAS, to know whether to
				// linger; a failed read is left to the CAS to report.
				c, rev, _ = o.store.current(ctx, convID)
			}
			jobs = o.linger(ctx, convID, c, jobs)
			c, rev = o.applyGroup(ctx, convID, jobs, c, rev)
		}
	}
	select {
	case <-j.done:
	case <-ctx.Done():
		// The leader may still record it; a redelivery is then a
		// duplicate.
		o.stats.TransientErrors.Add(1)
		verdictLabel = replyError
		m.Reply(kind, verdictLabel)
		return ctx.Err()
	}
	log := o.replyLog(in, convID)
	tool = j.tool
	if tool != "" {
		span.SetAttributes(telemetry.AttrTool.String(tool))
	}
	if errors.Is(j.err, ErrNotFound) {
		// The run id names a conversation that does not exist.
		return unknownRun()
	}
	if j.err != nil {
		o.stats.TransientErrors.Add(1)
		verdictLabel = replyError
		m.Reply(kind, verdictLabel)
		log.WarnContext(ctx, "reply not applied; will retry", slog.String("error", j.err.Error()))
		return j.err
	}
	verdictLabel = j.v.String()
	m.Reply(kind, verdictLabel)
	o.audit(ctx, convID, d, j)
	switch j.v {
	case verdictApplied:
		o.stats.RepliesApplied.Add(1)
		if !j.publishedAt.IsZero() {
			if in.decision != nil {
				m.DecisionLatency(tool, j.at.Sub(j.publishedAt))
			} else {
				m.ResultLatency(tool, j.at.Sub(j.publishedAt))
			}
		}
		if in.decision != nil && !in.decision.Approved {
			m.Denied(tool)
		}
		if err := d.Ack(); err != nil {
			log.WarnContext(ctx, "ack reply", slog.String("error", err.Error()))
		}
		log.DebugContext(ctx, "reply applied")
		return nil
	case verdictDuplicate:
		o.stats.Duplicates.Add(1)
		log.InfoContext(ctx, "duplicate reply", slog.String("reason", j.reason))
		return nil
	case verdictLate:
		o.stats.Late.Add(1)
		o.stats.DeadLettered.Add(1)
		m.DeadLetter(verdictLabel)
		if j.expired {
			// This reply found the call past its deadline first and
			// settled it as expired.
			o.stats.Expired.Add(1)
			m.Expired(kind)
		}
		log.WarnContext(ctx, "late reply refused", slog.String("reason", j.reason))
		return bus.Terminal(fmt.Errorf("late: %s", j.reason))
	default:
		o.stats.Refused.Add(1)
		o.stats.DeadLettered.Add(1)
		m.DeadLetter(verdictLabel)
		log.WarnContext(ctx, "reply refused", slog.String("reason", j.reason))
		return bus.Terminal(fmt.Errorf("refused: %s", j.reason))
	}
}

// Verdicts of replies that never reach a conversation, as metric labels
// beside verdict.String().
const (
	replyInvalid    = "invalid"     // malformed; dead-lettered
	replyUnknownRun = "unknown_run" // for a run no conversation has; dead-lettered
	replyError      = "error"       // not recorded for now; redelivered
)

func (o *Orchestrator) replyLog(in incoming, convID string) *slog.Logger {
	log := o.log.With(slog.String("run_id", in.runID), slog.String("tool_call_id", in.callID), slog.String("kind", string(in.kind)))
	if convID != "" {
		log = log.With(slog.String("conversation_id", convID))
	}
	return log
}

// applyGroup records jobs in the conversation by one CAS, starting from
// from (at rev; nil reads it) and, in the same write, claims the batch if
// they completed it; then it hands every job its verdict and moves the
// conversation on (the follow-up is launched, or the next deadline
// scheduled). It returns the state it wrote while it is still the caller's
// to reuse, else nil.
func (o *Orchestrator) applyGroup(ctx context.Context, convID string, jobs []*replyJob, from *Conversation, rev uint64) (*Conversation, uint64) {
	slices.SortFunc(jobs, func(a, b *replyJob) int { return cmp.Compare(a.seq, b.seq) })
	var followUp string
	apply := func(c *Conversation) error {
		now := o.clock()
		for _, j := range jobs {
			pc := c.Batch.call(j.in.callID)
			if c.Batch == nil || c.Batch.RunID != j.in.runID {
				pc = nil
			}
			settled := pc != nil && pc.Reply != nil
			j.v, j.reason = c.Apply(j.in, now)
			j.tool, j.publishedAt, j.at, j.expired = "", time.Time{}, now, false
			if pc != nil {
				j.tool, j.publishedAt = pc.ToolName, pc.PublishedAt
				j.expired = j.v == verdictLate && !settled
			}
		}
		c.UpdatedAt = now
		followUp = o.claimIn(c, now)
		return nil
	}
	conv, rev, err := o.store.updateFrom(ctx, convID, from, rev, apply)
	if tl := tooLarge(err); tl != nil {
		// The results do not fit: they are recorded as failed results,
		// which the follow-up shows the model.
		for _, j := range jobs {
			j.in = shrunk(j.in, tl)
		}
		conv, rev, err = o.store.updateFrom(ctx, convID, nil, 0, apply)
		if tl := tooLarge(err); tl != nil {
			o.failTooLarge(ctx, convID, tl)
			for _, j := range jobs {
				j.v, j.reason = verdictRefused, tl.Error()
				o.replyEvents(ctx, convID, j)
				close(j.done)
			}
			return nil, 0
		}
	}
	for _, j := range jobs {
		j.err = err
		if err == nil {
			o.replyEvents(ctx, convID, j)
		}
		close(j.done)
	}
	if err != nil {
		return nil, 0
	}
	if followUp != "" {
		o.claimed(ctx, conv, rev, followUp)
		return nil, 0
	}
	o.schedule(conv)
	return conv, rev
}

// The data of the reply events (package wire).
type (
	replyAppliedData = wire.ReplyApplied
	replyRefusedData = wire.ReplyRefused
	callsExpiredData = wire.CallsExpired
)

// replyEvents publishes what a recorded reply changed: the call answered,
// or the reply refused and why; and the call expired if the reply found it
// past its deadline.
func (o *Orchestrator) replyEvents(ctx context.Context, convID string, j *replyJob) {
	in := j.in
	if j.expired {
		o.publishEvent(ctx, convID, in.runID, EventCallsExpired, "", callsExpiredData{Calls: 1, ToolCallIDs: []string{in.callID}})
	}
	switch j.v {
	case verdictApplied:
		data := replyAppliedData{Kind: string(in.kind)}
		if d := in.decision; d != nil {
			approved := d.Approved
			data.Approved, data.ApproverID, data.Message = &approved, d.ApproverID, d.Message
			if !approved && data.Message == "" {
				data.Message = deferred.DefaultDenyMessage
			}
		} else if r := in.result; r != nil {
			data.Outcome, data.WorkerID = string(r.Outcome), r.WorkerID
			if data.Outcome == "" {
				data.Outcome = string(bus.OutcomeReturn)
			}
		}
		o.publishEvent(ctx, convID, in.runID, EventReplyApplied, in.callID, data)
	case verdictRefused, verdictLate:
		o.publishEvent(ctx, convID, in.runID, EventReplyRefused, in.callID, replyRefusedData{Kind: string(in.kind), Verdict: j.v.String(), Reason: j.reason})
	}
}

func incomingOf(r bus.Reply) (incoming, error) {
	in := incoming{runID: r.RunID}
	switch {
	case r.Decision != nil:
		if err := r.Decision.Validate(); err != nil {
			return incoming{}, err
		}
		in.kind, in.callID, in.decision = deferred.KindApproval, r.Decision.ToolCallID, r.Decision
	case r.Call != nil:
		if err := r.Call.Validate(); err != nil {
			return incoming{}, err
		}
		res, ok := r.Call.WithinLimit()
		if !ok {
			in.oversize = r.Call.PayloadBytes()
		}
		in.kind, in.callID, in.result = deferred.KindCall, r.Call.ToolCallID, &res
	default:
		return incoming{}, errors.New("reply holds neither a result nor a decision")
	}
	if err := checkReplySize(r); err != nil {
		return incoming{}, err
	}
	return in, nil
}

// checkTrust verifies a decision's signature when trusted keys are
// configured (D36).
func (o *Orchestrator) checkTrust(in incoming) error {
	if in.decision == nil || len(o.cfg.TrustedApprovers) == 0 {
		return nil
	}
	key, ok := o.cfg.TrustedApprovers[in.decision.ApproverID]
	if !ok {
		return fmt.Errorf("approver %q is not trusted", in.decision.ApproverID)
	}
	if len(in.decision.Signature) == 0 {
		return fmt.Errorf("decision from %s is not signed", in.decision.ApproverID)
	}
	if err := in.decision.Verify(ed25519.PublicKey(key)); err != nil {
		return fmt.Errorf("decision from %s: %w", in.decision.ApproverID, err)
	}
	return nil
}

// applyReply records a reply in the conversation c (read for a CAS) and
// says what became of it. Refusals are recorded too, on the call they were
// meant for.
func applyReply(c *Conversation, in incoming, now time.Time) (verdict, string) {
	b := c.Batch
	if b == nil || b.RunID != in.runID {
		if c.runRecord(in.runID) == nil {
			// A run id naming this conversation but none of its runs.
			return verdictRefused, fmt.Sprintf("conversation %s has no run %s", c.ID, in.runID)
		}
		// The run's batch is over: its calls were all answered and its
		// follow-up has taken them (or the run never paused).
		c.StaleReplies++
		return verdictDuplicate, fmt.Sprintf("run %s is no longer waiting", in.runID)
	}
	pc := b.call(in.callID)
	if pc == nil {
		b.UnknownReplies++
		return verdictRefused, fmt.Sprintf("run %s issued no call %s", in.runID, in.callID)
	}
	refuse := func(why string) (verdict, string) {
		pc.Refused++
		pc.LastRefusal = why
		return verdictRefused, why
	}
	if pc.Kind != in.kind {
		if in.kind == deferred.KindApproval {
			return refuse(fmt.Sprintf("wrong kind: a decision for external call %s", pc.ToolCallID))
		}
		return refuse(fmt.Sprintf("wrong kind: a result for approval call %s", pc.ToolCallID))
	}
	if pc.Reply != nil {
		if pc.Reply.Cancelled {
			reason := cancelledReason(c)
			pc.Late++
			pc.LastRefusal = reason
			return verdictLate, reason
		}
		if pc.Reply.Expired {
			reason := fmt.Sprintf("call %s expired at %s", pc.ToolCallID, pc.Deadline.UTC().Format(time.RFC3339))
			pc.Late++
			pc.LastRefusal = reason
			return verdictLate, reason
		}
		pc.Duplicates++
		return verdictDuplicate, fmt.Sprintf("call %s already answered", pc.ToolCallID)
	}
	if in.decision != nil {
		if in.decision.ArgsDigest != pc.ArgsDigest {
			return refuse(fmt.Sprintf("args digest of call %s does not match", pc.ToolCallID))
		}
		if in.trustErr != nil {
			return refuse(in.trustErr.Error())
		}
	}
	if !now.Before(pc.Deadline) {
		pc.Reply = expiredReply(pc, now)
		pc.Late++
		reason := fmt.Sprintf("call %s expired at %s", pc.ToolCallID, pc.Deadline.UTC().Format(time.RFC3339))
		pc.LastRefusal = reason
		return verdictLate, reason
	}
	pc.Reply = replyOf(in, now)
	pc.Reply.Trace = in.trace
	// Answered, so it was published: nothing publishes it again.
	pc.Published = true
	if d := in.decision; d != nil {
		c.Decisions = append(c.Decisions, DecisionRecord{
			RunID: in.runID, ToolCallID: pc.ToolCallID, ToolName: pc.ToolName,
			Approved: d.Approved, Message: pc.Reply.Message, ApproverID: d.ApproverID, At: now,
		})
	}
	return verdictApplied, ""
}

func replyOf(in incoming, now time.Time) *Reply {
	if d := in.decision; d != nil {
		r := &Reply{By: d.ApproverID, At: now}
		if d.Approved {
			r.Outcome = OutcomeApproved
			if len(d.OverrideArgs) > 0 && string(d.OverrideArgs) != "null" {
				r.OverrideArgs = d.OverrideArgs
			}
		} else {
			r.Outcome = OutcomeDenied
			r.Message = d.Message
			if r.Message == "" {
				r.Message = deferred.DefaultDenyMessage
			}
		}
		return r
	}
	res := in.result
	r := &Reply{By: res.WorkerID, At: now}
	switch res.Outcome {
	case bus.OutcomeRetry:
		r.Outcome, r.Message = OutcomeRetry, res.Message
	case bus.OutcomeFailed:
		r.Outcome, r.Message = OutcomeFailed, res.Message
	default:
		r.Outcome, r.Value, r.Content, r.Metadata = OutcomeReturn, res.Value, res.Content, res.Metadata
	}
	return r
}
