package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// runner executes runs under their leases, one slot each: a start, a
// claimed follow-up, a relaunch (runner.go, inline.go, complete.go).
type runner struct {
	runnerParams
	sem      chan struct{}
	ending   chan struct{} // endSlot's window
	launchMu sync.Mutex    // orders launches before Stop's wait for runs
	// inflight are the runs queued or executing in this process, by run
	// id.
	inflight map[string]*inflightRun
	// executing cancels the runs executing in this process, by run id (a
	// cancel notice ends them at once).
	executing map[string]context.CancelFunc
	cancelSub *nats.Subscription
	runs      sync.WaitGroup
}

// runnerParams are the runner's collaborators.
type runnerParams struct {
	cfg       Config
	log       *slog.Logger
	clock     func() time.Time
	bus       *bus.Bus
	tracer    trace.Tracer
	observer  observer
	events    *eventPublisher
	discovery *discovery
	roster    *roster
	pub       *publisher
	// store and fx, the conversations and their write path, are handed
	// over when the orchestrator starts (Start).
	store *store
	fx    *effector
	// liveGrants are the grants that may answer req's approvals.
	liveGrants func(ctx context.Context, r *roster, req *deferred.Requests) grantSet
	// runCtx is the parent of every run; stopped is set as Stop begins.
	runCtx  context.Context
	stopped *atomic.Bool
}

// goUnlessStopped runs f on a goroutine that Stop waits for, as it waits
// for runs, unless the orchestrator is stopping.
func (rn *runner) goUnlessStopped(f func()) {
	rn.launchMu.Lock()
	defer rn.launchMu.Unlock()
	if !rn.stopped.Load() {
		rn.runs.Go(f)
	}
}

// inflightRun is a run queued or executing in this process: d is its
// deferred record, if it has one; next the hooks of a launch that waits
// for it to end.
type inflightRun struct {
	d    *deferredAppend
	next *runHooks
}

// launchFrom executes a run in the bounded pool, from the conversation as
// this process last wrote it (at revision rev), which the run starts from
// instead of reading it again; c is handed over to the run. A nil c reads
// the state. The caller has stored the run's lease, or defers the record
// that holds it (d, tentative.go); if the orchestrator is stopping, the
// run is left to its lease expiring, and another replica (or the next
// start) relaunches it. A run already queued or executing here is not
// launched twice. hooks are told of a run launched.
func (rn *runner) launchFrom(convID, runID string, c *conversation.State, rev uint64, d *deferredAppend, hooks runHooks) {
	rn.launchMu.Lock()
	if d != nil && (rn.stopped.Load() || rn.inflight[runID] != nil) {
		stopped := rn.stopped.Load()
		rn.launchMu.Unlock()
		// Nothing stored: the replies are delivered again; a start whose
		// run is going on here already is a repeat of it (an idempotency
		// key's), whose conversation is stored. (Not under launchMu: a
		// claim being dropped holds its lock while its replies are
		// recorded again, which may launch a run.)
		err := ErrStopped
		if !stopped {
			err = fmt.Errorf("start conversation %s: run %s going on here: %w", convID, runID, errExists)
		}
		d.abandon(err)
		return
	}
	defer rn.launchMu.Unlock()
	if rn.stopped.Load() {
		// Let the next replica (or start) take it at once rather than
		// after the lease runs out.
		ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
		defer cancel()
		rn.releaseLease(ctx, convID, runID)
		return
	}
	if ir := rn.inflight[runID]; ir != nil {
		if ir.d != nil && ir.d.dropped() {
			// The run going on here is one whose deferred record was
			// dropped (a start that found its conversation stored): it is
			// ending, and this launch follows once it has.
			ir.next = &hooks
		}
		return
	}
	ir := &inflightRun{d: d}
	rn.inflight[runID] = ir
	hooks.began()
	rn.runs.Go(func() {
		defer func() {
			// Told before the run id may be launched again.
			hooks.ended()
			rn.launchMu.Lock()
			delete(rn.inflight, runID)
			next := ir.next
			rn.launchMu.Unlock()
			if next != nil {
				rn.launchFrom(convID, runID, nil, 0, nil, *next)
			}
		}()
		slot := false
		if d != nil {
			select {
			case rn.sem <- struct{}{}:
				slot = true
			default:
				// No slot: the window would pass waiting for one, with the
				// replies held. The claim is stored now, as it was before.
				sctx, cancel := context.WithTimeout(rn.runCtx, replyTimeout)
				err := d.store(sctx)
				cancel()
				if err != nil {
					return
				}
			}
		}
		if !slot {
			select {
			case rn.sem <- struct{}{}:
			case <-rn.runCtx.Done():
				if d != nil {
					d.abandon(ErrStopped)
				}
				return
			}
		}
		var once sync.Once
		release := func() { once.Do(func() { <-rn.sem }) }
		defer release()
		rn.execute(convID, runID, c, rev, release, d)
	})
}

// endSlot is held while a run's end is stored. A run gives its run slot
// back once its agent is done, so that the next run's model work does not
// wait for this one's writes: the writes of ended runs are bounded
// separately, by a window of their own (Config.MaxConcurrentRuns × 4).
func (rn *runner) endSlot(ctx context.Context) (func(), error) {
	select {
	case rn.ending <- struct{}{}:
		return func() { <-rn.ending }, nil
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
func (rn *runner) execute(convID, runID string, c *conversation.State, rev uint64, release func(), d *deferredAppend) {
	log := rn.log.With(slog.String("conversation_id", convID), slog.String("run_id", runID))
	ctx, cancel := context.WithTimeout(rn.runCtx, rn.cfg.RunTimeout)
	defer cancel()
	if d != nil {
		if !d.setCancel(cancel) {
			return
		}
	}
	rn.launchMu.Lock()
	rn.executing[runID] = cancel
	rn.launchMu.Unlock()
	defer func() {
		rn.launchMu.Lock()
		delete(rn.executing, runID)
		rn.launchMu.Unlock()
	}()

	if c == nil {
		var err error
		if c, rev, err = rn.store.get(ctx, convID); err != nil {
			log.WarnContext(ctx, "run: read state", slog.String("error", err.Error()))
			return
		}
	}
	if !c.HoldsLease(rn.cfg.InstanceID, runID) {
		log.InfoContext(ctx, "run: lease held elsewhere; not running")
		return
	}
	ag := rn.roster.runnable(c)
	if ag == nil && d != nil && d.store(ctx) != nil {
		return
	}
	if ag == nil {
		// Never run with another agent than the conversation's: whatever
		// gave this replica the lease, the run goes to the agent's
		// replicas.
		log.WarnContext(ctx, "run: not of an agent this replica runs; handed over", slog.String("agent", c.Agent), slog.String("agent_digest", ShortDigest(c.AgentDigest)))
		rn.releaseLease(ctx, convID, runID)
		rn.fx.handOver(ctx, c)
		return
	}
	log = log.With(slog.String("agent", ag.name))
	// The tools are those of this moment for the whole run: a tool that a
	// worker starts or stops advertising meanwhile is seen by the next run.
	rt := rn.discovery.toolsForRun(ag.cfg)
	rn.discovery.addFrontend(rt, c.FrontendTools)
	rn.discovery.runTools.Store(runID, rt)
	defer rn.discovery.runTools.Delete(runID)
	ctx = context.WithValue(ctx, runToolsKey{}, rt)
	// The history's room past its length goes to one run at most.
	room := c.TakeHistoryRoom()
	history := c.History
	if !room {
		history = slices.Clip(history)
	}
	in := agent.RunInput{RunID: runID, ConversationID: convID, History: history, HistoryRoom: room, Deps: rn.cfg.Deps, Caller: c.Caller}
	if d != nil {
		in.BeforeEffects = d.store
	}
	// A follow-up (resuming), or a new prompt after a cancel that settled
	// a paused batch (running), resumes from the batch.
	resume := (c.Status == conversation.StatusResuming || c.Status == conversation.StatusRunning) && c.Batch != nil && c.Batch.FollowUpRunID == runID
	var parent map[string]string
	var links []map[string]string
	if rec := c.RunRecord(runID); rec != nil {
		in.Prompt = rec.Prompt
	}
	if resume {
		// The stored batch as the paused run produced it: an entry approved
		// with override args and deferred again carries them (D24, D26).
		reqs := c.Batch.Requests()
		res := c.Batch.Results()
		staleApprovals(c.Batch, rt, &res)
		in.Requests, in.Results = &reqs, &res
		parent, links = c.Batch.FollowUpTrace()
		if in.Prompt == "" {
			in.Prompt = c.Batch.Prompt
		}
	}
	ctx, span := telemetry.StartRun(ctx, rn.tracer, "run", parent, links,
		telemetry.AttrRunID.String(runID), telemetry.AttrConversationID.String(convID), attribute.Bool("toolgate.resume", resume))
	defer span.End()
	status := rn.executeTraced(ctx, log, ag, convID, runID, c, rev, in, resume, cancel, release, d)
	span.SetAttributes(attribute.String("toolgate.status", status))
	if status == string(conversation.StatusFailed) {
		span.SetStatus(codes.Error, "run failed")
	}
	rn.observer.runFinished(ag.name, status)
}

// Run ends other than by a stored status.
const (
	runInterrupted = "interrupted" // shutdown cut it short; relaunched elsewhere or later
	runLeaseLost   = "lease_lost"  // another replica took it over
	runNotStored   = "not_stored"  // its end could not be written; relaunched when its lease expires
	runDropped     = "dropped"     // its claim could not be stored (tentative.go)
)

// executeTraced runs the agent inside the run's span (ctx) and stores what
// it ended with; it returns how the run ended.
func (rn *runner) executeTraced(ctx context.Context, log *slog.Logger, ag *agentRuntime, convID, runID string, c *conversation.State, rev uint64, in agent.RunInput, resume bool, cancel context.CancelFunc, release func(), d *deferredAppend) string {
	renewCtx, stopRenew := context.WithCancel(ctx)
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		if d != nil {
			// Nothing to renew before the claim is stored.
			select {
			case <-d.settled:
			case <-renewCtx.Done():
				return
			}
		}
		rn.renewLease(renewCtx, cancel, convID, runID)
	}()
	rn.events.publish(ctx, convID, runID, EventRunStarted, "", runStartedData{Resume: resume, Prompt: in.Prompt, Agent: ag.name, Replica: rn.cfg.InstanceID})
	log.InfoContext(ctx, "run started", slog.Bool("resume", resume))
	res, runErr := rn.runAgent(ctx, ag.agent, convID, runID, in)
	stopRenew()
	<-renewDone

	// The end is stored after the run's deadline too, still in its trace.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), replyTimeout)
	defer fcancel()
	if rn.runCtx.Err() != nil {
		// Shutting down: the run did not fail, it was interrupted. Release
		// the lease so that a replica relaunches it at once; a claim not
		// stored leaves nothing to release.
		if d != nil && d.abandon(ErrStopped) {
			log.InfoContext(fctx, "run interrupted by shutdown before its claim was stored")
			return runInterrupted
		}
		rn.releaseLease(fctx, convID, runID)
		log.InfoContext(fctx, "run interrupted by shutdown")
		return runInterrupted
	}
	if runErr == nil && res == nil {
		runErr = errors.New("run ended without a result")
	}
	if d != nil && d.dropped() {
		// Cancelled by the drop, not by another replica.
		return runDropped
	}
	if runErr != nil && errors.Is(ctx.Err(), context.Canceled) {
		// Cancelled without shutdown: the lease was lost to another
		// replica, which owns the run now.
		rn.observer.leaseLost()
		log.WarnContext(fctx, "run abandoned: lease lost")
		return runLeaseLost
	}
	done, err := rn.endSlot(fctx)
	if err != nil {
		log.ErrorContext(fctx, "store run result", slog.String("error", err.Error()))
		return runNotStored
	}
	defer done()
	release()
	return rn.finish(fctx, log, convID, runID, c, rev, res, runErr, d)
}

type runStartedData = wire.RunStarted

// runAgent runs the agent and publishes its events.
func (rn *runner) runAgent(ctx context.Context, a *agent.Agent, convID, runID string, in agent.RunInput) (*agent.RunResult, error) {
	var res *agent.RunResult
	for ev, err := range a.Events(ctx, in) {
		if err != nil {
			return nil, err
		}
		rn.events.agentEvent(ctx, convID, runID, ev)
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
func (rn *runner) finish(ctx context.Context, log *slog.Logger, convID, runID string, from *conversation.State, rev uint64, res *agent.RunResult, runErr error, d *deferredAppend) string {
	now := rn.clock()
	runTrace := telemetry.InjectMap(ctx)
	var newBatchErr, tooBig error
	// One flag for the room of the history the run ended with, however
	// many times end is applied.
	var room *atomic.Bool
	if res != nil && cap(res.AllMessages) > len(res.AllMessages) {
		room = new(atomic.Bool)
	}
	// Read before the write, which may be retried and does no I/O.
	grants := rn.liveGrants(ctx, rn.roster, deferredOf(res, runErr))
	// The run's end, as of when it ended however often it is applied.
	end := func(c *conversation.State, _ time.Time) ([]conversation.Effect, error) {
		newBatchErr = nil
		var granted []conversation.GrantUse
		owner := rn.cfg.InstanceID
		if !c.HoldsLease(owner, runID) {
			return nil, conversation.ErrLeaseLost
		}
		if tooBig != nil {
			// What the run ended with does not fit: the run fails, its
			// history as it was.
			if err := c.Fail(owner, runID, tooBig.Error(), now); err != nil {
				return nil, err
			}
			return conversation.EndedEffects(c, runID, nil), nil
		}
		if runErr == nil && res.Deferred != nil {
			b, err := rn.pub.newBatch(rn.roster.agentOf(c), runID, res.Deferred, c.Batch, runTrace)
			if err == nil {
				// A prompt the run held back goes with the next resume.
				b.Prompt = res.HeldPrompt
				c.SetHistoryRoom(room)
				if err := c.Pause(owner, runID, res.AllMessages, b, now); err != nil {
					return nil, err
				}
				granted = applyGrants(c, grants, now)
				return conversation.EndedEffects(c, runID, granted), nil
			}
			newBatchErr = err
		}
		var err error
		if rerr := errors.Join(runErr, newBatchErr); rerr != nil {
			err = c.Fail(owner, runID, rerr.Error(), now)
		} else {
			c.SetHistoryRoom(room)
			err = c.Complete(owner, runID, res.AllMessages, res.Output, now)
		}
		if err != nil {
			return nil, err
		}
		return conversation.EndedEffects(c, runID, nil), nil
	}
	c, _, err := rn.fx.doRun(ctx, convID, from, rev, d, end)
	if errors.Is(err, errDeferredDropped) {
		return runDropped
	}
	if tl := tooLarge(err); tl != nil {
		tooBig = tl
		c, _, err = rn.fx.doFrom(ctx, convID, nil, 0, end)
		if tl := tooLarge(err); tl != nil {
			rn.fx.failTooLarge(ctx, convID, tl)
			return string(conversation.StatusFailed)
		}
	}
	if err != nil {
		if errors.Is(err, conversation.ErrLeaseLost) {
			rn.observer.leaseLost()
			log.WarnContext(ctx, "run result dropped: lease lost")
			return runLeaseLost
		}
		log.ErrorContext(ctx, "store run result", slog.String("error", err.Error()))
		return runNotStored
	}
	return string(c.Status)
}

// deferredOf is what a run that ended with res and runErr deferred; nil
// when it failed or deferred nothing.
func deferredOf(res *agent.RunResult, runErr error) *deferred.Requests {
	if runErr != nil || res == nil {
		return nil
	}
	return res.Deferred
}

// renewLease extends the run's lease every third of its TTL; if another
// replica took it, the run is cancelled.
func (rn *runner) renewLease(ctx context.Context, cancelRun context.CancelFunc, convID, runID string) {
	t := time.NewTicker(rn.cfg.LeaseTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, _, err := rn.fx.do(ctx, convID, conversation.RenewTransition(rn.cfg.InstanceID, runID, rn.cfg.LeaseTTL))
		switch {
		case errors.Is(err, conversation.ErrLeaseLost):
			cancelRun()
			return
		case err != nil && ctx.Err() == nil:
			rn.log.WarnContext(ctx, "renew lease", slog.String("conversation_id", convID), slog.String("error", err.Error()))
		}
	}
}

// releaseLease lets the lease of an interrupted run expire now.
func (rn *runner) releaseLease(ctx context.Context, convID, runID string) {
	_, _, err := rn.fx.do(ctx, convID, conversation.ReleaseTransition(rn.cfg.InstanceID, runID))
	if err != nil {
		rn.log.WarnContext(ctx, "release lease", slog.String("conversation_id", convID), slog.String("error", err.Error()))
	}
}

// subscribeCancels makes this replica stop its runs of conversations
// cancelled anywhere.
func (rn *runner) subscribeCancels() error {
	sub, err := rn.bus.SubscribeCancels(func(runID string) {
		rn.launchMu.Lock()
		cancel := rn.executing[runID]
		rn.launchMu.Unlock()
		if cancel != nil {
			cancel()
		}
	})
	if err != nil {
		return err
	}
	rn.cancelSub = sub
	return nil
}
