package orchestrator

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// errLeaseLost ends a run whose lease another replica took over.
var errLeaseLost = errors.New("lease lost")

// launch executes a run in the bounded pool. The caller has taken the run's
// lease in KV; if the orchestrator is stopping, the run is left to its lease
// expiring, and another replica (or the next start) relaunches it. A run
// already queued or executing here is not launched twice.
func (o *Orchestrator) launch(convID, runID string) { o.launchFrom(convID, runID, nil, 0) }

// launchFrom is launch with the conversation as this process last wrote it
// (at revision rev), which the run starts from instead of reading it again;
// c is handed over to the run. A nil c reads the state.
func (o *Orchestrator) launchFrom(convID, runID string, c *Conversation, rev uint64) {
	o.launchMu.Lock()
	defer o.launchMu.Unlock()
	if o.stopped.Load() {
		// Let the next replica (or start) take it at once rather than
		// after the lease runs out.
		ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
		defer cancel()
		o.releaseLease(ctx, convID, runID)
		return
	}
	if o.inflight[runID] {
		return
	}
	o.inflight[runID] = true
	o.runs.Go(func() {
		defer func() {
			o.launchMu.Lock()
			delete(o.inflight, runID)
			o.launchMu.Unlock()
		}()
		select {
		case o.sem <- struct{}{}:
		case <-o.runCtx.Done():
			return
		}
		var once sync.Once
		release := func() { once.Do(func() { <-o.sem }) }
		defer release()
		o.execute(convID, runID, c, rev, release)
	})
}

// endSlot is held while a run's end is stored. A run gives its run slot
// back once its agent is done, so that the next run's model work does not
// wait for this one's writes: the writes of ended runs are bounded
// separately, by a window of their own (Config.MaxConcurrentRuns × 4).
func (o *Orchestrator) endSlot(ctx context.Context) (func(), error) {
	select {
	case o.ending <- struct{}{}:
		return func() { <-o.ending }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// execute runs one run of a conversation from its stored state: a prompt run
// from the history and the run's prompt, a follow-up from the stored history,
// the stored Requests and Results built from the stored replies (D36).
//
// A state handed over by the launcher is as this process wrote it when it
// took the lease; if it changed since, finish's CAS notices and re-reads.
func (o *Orchestrator) execute(convID, runID string, c *Conversation, rev uint64, release func()) {
	log := o.log.With(slog.String("conversation_id", convID), slog.String("run_id", runID))
	ctx, cancel := context.WithTimeout(o.runCtx, o.cfg.RunTimeout)
	defer cancel()
	o.launchMu.Lock()
	o.executing[runID] = cancel
	o.launchMu.Unlock()
	defer func() {
		o.launchMu.Lock()
		delete(o.executing, runID)
		o.launchMu.Unlock()
	}()

	if c == nil {
		var err error
		if c, rev, err = o.store.get(ctx, convID); err != nil {
			log.WarnContext(ctx, "run: read state", slog.String("error", err.Error()))
			return
		}
	}
	if !c.holdsLease(o.cfg.InstanceID, runID) {
		log.InfoContext(ctx, "run: lease held elsewhere; not running")
		return
	}
	ag := o.runnable(c)
	if ag == nil {
		// Never run with another agent than the conversation's: whatever
		// gave this replica the lease, the run goes to the agent's
		// replicas.
		log.WarnContext(ctx, "run: not of an agent this replica runs; handed over", slog.String("agent", c.Agent), slog.String("agent_digest", ShortDigest(c.AgentDigest)))
		o.releaseLease(ctx, convID, runID)
		o.handOver(ctx, c)
		return
	}
	log = log.With(slog.String("agent", ag.name))
	// The tools are those of this moment for the whole run: a tool that a
	// worker starts or stops advertising meanwhile is seen by the next run.
	rt := o.discovery.toolsForRun(ag.cfg)
	o.discovery.runTools.Store(runID, rt)
	defer o.discovery.runTools.Delete(runID)
	ctx = context.WithValue(ctx, runToolsKey{}, rt)
	in := agent.RunInput{RunID: runID, ConversationID: convID, History: c.History, Deps: o.cfg.Deps, Caller: c.Caller}
	// A follow-up (resuming), or a new prompt after a cancel that settled
	// a paused batch (running), resumes from the batch.
	resume := (c.Status == StatusResuming || c.Status == StatusRunning) && c.Batch != nil && c.Batch.FollowUpRunID == runID
	var parent map[string]string
	var links []map[string]string
	if rec := c.runRecord(runID); rec != nil {
		in.Prompt = rec.Prompt
	}
	if resume {
		// The stored batch as the paused run produced it: an entry approved
		// with override args and deferred again carries them (D24, D26).
		reqs := c.Batch.requests()
		res := c.Batch.results()
		staleApprovals(c.Batch, rt, &res)
		in.Requests, in.Results = &reqs, &res
		parent, links = c.Batch.followUpTrace()
		if in.Prompt == "" {
			in.Prompt = c.Batch.Prompt
		}
	}
	ctx, span := telemetry.StartRun(ctx, o.tracer, "run", parent, links,
		telemetry.AttrRunID.String(runID), telemetry.AttrConversationID.String(convID), attribute.Bool("toolgate.resume", resume))
	defer span.End()
	status := o.executeTraced(ctx, log, ag, convID, runID, c, rev, in, resume, cancel, release)
	span.SetAttributes(attribute.String("toolgate.status", status))
	if status == string(StatusFailed) {
		span.SetStatus(codes.Error, "run failed")
	}
	o.cfg.Metrics.RunFinished(ag.name, status)
}

// Run ends other than by a stored status.
const (
	runInterrupted = "interrupted" // shutdown cut it short; relaunched elsewhere or later
	runLeaseLost   = "lease_lost"  // another replica took it over
	runNotStored   = "not_stored"  // its end could not be written; relaunched when its lease expires
)

// executeTraced runs the agent inside the run's span (ctx) and stores what
// it ended with; it returns how the run ended.
func (o *Orchestrator) executeTraced(ctx context.Context, log *slog.Logger, ag *agentRuntime, convID, runID string, c *Conversation, rev uint64, in agent.RunInput, resume bool, cancel context.CancelFunc, release func()) string {
	renewCtx, stopRenew := context.WithCancel(ctx)
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		o.renewLease(renewCtx, cancel, convID, runID)
	}()
	o.events.publish(ctx, convID, runID, EventRunStarted, "", runStartedData{Resume: resume, Prompt: in.Prompt, Agent: ag.name, Replica: o.cfg.InstanceID})
	log.InfoContext(ctx, "run started", slog.Bool("resume", resume))
	res, runErr := o.runAgent(ctx, ag.agent, convID, runID, in)
	stopRenew()
	<-renewDone

	// The end is stored after the run's deadline too, still in its trace.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), replyTimeout)
	defer fcancel()
	if o.runCtx.Err() != nil {
		// Shutting down: the run did not fail, it was interrupted. Release
		// the lease so that a replica relaunches it at once.
		o.releaseLease(fctx, convID, runID)
		log.InfoContext(fctx, "run interrupted by shutdown")
		return runInterrupted
	}
	if runErr == nil && res == nil {
		runErr = errors.New("run ended without a result")
	}
	if runErr != nil && errors.Is(ctx.Err(), context.Canceled) {
		// Cancelled without shutdown: the lease was lost to another
		// replica, which owns the run now.
		o.stats.LeaseLost.Add(1)
		log.WarnContext(fctx, "run abandoned: lease lost")
		return runLeaseLost
	}
	done, err := o.endSlot(fctx)
	if err != nil {
		log.ErrorContext(fctx, "store run result", slog.String("error", err.Error()))
		return runNotStored
	}
	defer done()
	release()
	return o.finish(fctx, log, convID, runID, c, rev, res, runErr)
}

type runStartedData = wire.RunStarted

// runAgent runs the agent and publishes its events.
func (o *Orchestrator) runAgent(ctx context.Context, a *agent.Agent, convID, runID string, in agent.RunInput) (*agent.RunResult, error) {
	var res *agent.RunResult
	for ev, err := range a.Events(ctx, in) {
		if err != nil {
			return nil, err
		}
		o.events.agentEvent(ctx, convID, runID, ev)
		if ev.Kind == agent.EventRunDone {
			res = ev.Result
		}
	}
	return res, nil
}

// finish stores what the run ended with, starting from the state the run
// started from (at rev). A paused run's batch is stored first, then
// published, then claimed at once if it is already complete (replies that
// came while the run waited inline). ctx carries the run's span, whose
// context the batch keeps. It returns how the run ended.
func (o *Orchestrator) finish(ctx context.Context, log *slog.Logger, convID, runID string, from *Conversation, rev uint64, res *agent.RunResult, runErr error) string {
	now := o.clock()
	runTrace := telemetry.InjectMap(ctx)
	var newBatchErr, tooBig error
	end := func(c *Conversation) error {
		newBatchErr = nil
		owner := o.cfg.InstanceID
		if !c.holdsLease(owner, runID) {
			return errLeaseLost
		}
		if tooBig != nil {
			// What the run ended with does not fit: the run fails, its
			// history as it was.
			return c.Fail(owner, runID, tooBig.Error(), now)
		}
		if runErr == nil && res.Deferred != nil {
			b, err := o.newBatch(o.agentOf(c), runID, res.Deferred, c.Batch, runTrace)
			if err == nil {
				return c.Pause(owner, runID, res.AllMessages, b, now)
			}
			newBatchErr = err
		}
		if err := errors.Join(runErr, newBatchErr); err != nil {
			return c.Fail(owner, runID, err.Error(), now)
		}
		return c.Complete(owner, runID, res.AllMessages, res.Output, now)
	}
	c, rev, err := o.store.updateFrom(ctx, convID, from, rev, end)
	if tl := tooLarge(err); tl != nil {
		tooBig = tl
		c, rev, err = o.store.updateFrom(ctx, convID, nil, 0, end)
		if tl := tooLarge(err); tl != nil {
			o.failTooLarge(ctx, convID, tl)
			return string(StatusFailed)
		}
	}
	if err != nil {
		if errors.Is(err, errLeaseLost) {
			o.stats.LeaseLost.Add(1)
			log.WarnContext(ctx, "run result dropped: lease lost")
			return runLeaseLost
		}
		log.ErrorContext(ctx, "store run result", slog.String("error", err.Error()))
		return runNotStored
	}
	if c.Status.Terminal() {
		o.stats.EndWrites.Add(1)
	}
	o.ended(ctx, log, c, runID)
	return string(c.Status)
}

// ended tells what the run's end stored: an event, and for a pause the
// publication of its batch (off the run's way) and OnRunEnd.
func (o *Orchestrator) ended(ctx context.Context, log *slog.Logger, c *Conversation, runID string) {
	convID := c.ID
	switch c.Status {
	case StatusFailed:
		log.WarnContext(ctx, "run failed", slog.String("error", c.Error))
		o.events.publish(ctx, convID, runID, EventRunFailed, "", wire.RunFailed{Error: c.Error})
	case StatusCompleted:
		log.InfoContext(ctx, "run completed")
		o.events.publish(ctx, convID, runID, EventRunCompleted, "", wire.RunCompleted{Output: c.Output})
	case StatusPaused:
		log.InfoContext(ctx, "run paused", slog.Int("calls", len(c.Batch.Calls)))
		o.events.publish(ctx, convID, runID, EventRunPaused, "", c.PendingCalls())
		// Nothing on the calls' way waits for their acks: a worker gets a
		// call once the stream has stored it, whether or not this replica
		// has heard so, and a publish that fails is left to reconcile, which
		// publishes what is unmarked. The acks are awaited off the run's
		// path (and before Stop returns), then OnRunEnd is told; c is not
		// changed after this.
		o.runs.Go(func() {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replyTimeout)
			defer cancel()
			if _, err := o.publishCalls(pctx, c); err != nil {
				log.WarnContext(pctx, "publish batch", slog.String("error", err.Error()))
			}
			if o.cfg.OnRunEnd != nil {
				o.cfg.OnRunEnd(c)
			}
		})
		o.afterApply(ctx, c)
		return
	}
	if o.cfg.OnRunEnd != nil {
		o.cfg.OnRunEnd(c)
	}
}

// renewLease extends the run's lease every third of its TTL; if another
// replica took it, the run is cancelled.
func (o *Orchestrator) renewLease(ctx context.Context, cancelRun context.CancelFunc, convID, runID string) {
	t := time.NewTicker(o.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := o.store.update(ctx, convID, func(c *Conversation) error {
			return c.Renew(o.cfg.InstanceID, runID, o.clock().Add(o.cfg.LeaseTTL))
		})
		switch {
		case errors.Is(err, errLeaseLost):
			cancelRun()
			return
		case err != nil && ctx.Err() == nil:
			o.log.WarnContext(ctx, "renew lease", slog.String("conversation_id", convID), slog.String("error", err.Error()))
		}
	}
}

// releaseLease lets the lease of an interrupted run expire now.
func (o *Orchestrator) releaseLease(ctx context.Context, convID, runID string) {
	_, err := o.store.update(ctx, convID, func(c *Conversation) error {
		if !c.Release(o.cfg.InstanceID, runID) {
			return errUnchanged
		}
		return nil
	})
	if err != nil {
		o.log.WarnContext(ctx, "release lease", slog.String("conversation_id", convID), slog.String("error", err.Error()))
	}
}

// relaunch takes over a run whose lease expired (its replica died or shut
// down) and executes it again with the same run id, so that what it
// publishes again dedupes.
func (o *Orchestrator) relaunch(ctx context.Context, convID string) {
	var runID string
	_, err := o.store.update(ctx, convID, func(c *Conversation) error {
		if (c.Status == StatusRunning || c.Status == StatusResuming) && !c.leaseLive(o.clock()) && !o.take(c) {
			// Another agent's (or another config's): left to its replicas.
			runID = ""
			return errUnchanged
		}
		var failed bool
		runID, failed = c.TakeOver(o.cfg.InstanceID, o.clock(), o.cfg.LeaseTTL)
		if runID == "" && !failed {
			return errUnchanged
		}
		return nil
	})
	if err != nil {
		o.log.WarnContext(ctx, "relaunch", slog.String("conversation_id", convID), slog.String("error", err.Error()))
		return
	}
	if runID == "" {
		return
	}
	o.stats.RunsRelaunched.Add(1)
	o.log.InfoContext(ctx, "relaunching run", slog.String("conversation_id", convID), slog.String("run_id", runID))
	o.launch(convID, runID)
}
