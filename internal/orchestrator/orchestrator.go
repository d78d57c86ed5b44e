// Package orchestrator glues the agent loop to the bus: it starts runs,
// keeps each conversation as an append-only log, publishes paused
// conversations' deferred calls to tool-workers and approvers, collects and
// verifies the replies, completes each batch exactly once and launches its
// follow-up run, settles expired calls, and answers the public methods that
// the HTTP API (internal/api) and embedding programs call (D35–D37).
//
// Nothing about a paused conversation needs to be kept in memory: its state
// is the fold of its log, the subject toolgate.conv.<id> of stream
// TOOLGATE_CONVERSATIONS, appended to with the expected last sequence of
// the record a change was made from (optimistic concurrency), so any number
// of replicas can share the work and a restarted one picks up where the
// last left off. A bounded cache keeps recent states; it is only a cache
// (docs/architecture.md, "Conversation state").
//
// The conversation's state, its records and its transitions, which return
// the effects of their write, are package conversation; the effector
// (effector.go) carries out the effects of the write that won.
package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// Orchestrator runs agents over the bus. Create it with New, then Start;
// Stop ends it.
//
// Its methods are what its users call; the work is done by its parts
// (parts.go; the roster, the runner and the publisher with their methods),
// each with one job.
type Orchestrator struct {
	*core
	// The parts, wired in New: each is handed the parts it uses.
	roster *roster
	runner *runner
	pub    *publisher
	link   *replicaLink
	pipe   *replyPipeline
	rec    *reconciler
}

// EventsPending is the number of events queued for the events stream or
// being published: a step's events wait for its run's end (and, after a
// pause on external calls, for a quick follow-up) for at most a quarter of
// a second before they go. It also counts the calls whose tool_unserved
// event may still come: those published while a look at their tool's
// workers is under way, which takes a couple of seconds for a tool nobody
// serves.
func (o *Orchestrator) EventsPending() int {
	n := o.events.queue.pending()
	if o.pub.unserved != nil {
		n += o.pub.unserved.pending()
	}
	return n
}

// New checks cfg and builds an Orchestrator; it does no I/O.
func New(cfg Config) (*Orchestrator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("orchestrator config: %w", err)
	}
	o := &Orchestrator{core: &core{
		cfg:       cfg,
		log:       cfg.Logger.With(slog.String("component", "orchestrator"), slog.String("instance", cfg.InstanceID)),
		bus:       cfg.Bus,
		clock:     cfg.Clock,
		stopping:  make(chan struct{}),
		deadlines: newDeadlineIndex(),
		tracer:    telemetry.Tracer(cfg.TracerProvider),
	}}
	o.once.log = o.log
	o.observer = newObserver(cfg.Metrics, cfg.Observer)
	o.runCtx, o.cancel = context.WithCancel(context.Background())
	o.loopCtx, o.stopLoops = context.WithCancel(o.runCtx)
	o.events = newEventPublisher(cfg.EventBus, o.log, o.clock)
	o.roster = &roster{rosterParams: rosterParams{cfg: cfg, clock: o.clock, discovery: &o.discovery, once: &o.once}}
	o.pub = &publisher{publisherParams: publisherParams{
		log: o.log, clock: o.clock, bus: o.bus, observer: o.observer, deadlines: o.deadlines,
		discovery: &o.discovery, roster: o.roster,
		do: func(ctx context.Context, id string, t conversation.Transition) error {
			_, _, err := o.fx.do(ctx, id, t)
			return err
		},
	}}
	o.runner = &runner{runnerParams: runnerParams{
		cfg: cfg, log: o.log, clock: o.clock, bus: o.bus, tracer: o.tracer, observer: o.observer, events: o.events,
		discovery: &o.discovery, roster: o.roster, pub: o.pub, liveGrants: o.liveGrants, runCtx: o.runCtx, stopped: &o.stopped,
	},
		sem:       make(chan struct{}, cfg.MaxConcurrentRuns),
		ending:    make(chan struct{}, 4*cfg.MaxConcurrentRuns),
		inflight:  map[string]*inflightRun{},
		executing: map[string]context.CancelFunc{},
	}
	o.roster.inline = o.runner.handleInline
	o.rec = &reconciler{reconcilerParams{
		cfg: cfg, log: o.log, clock: o.clock, bus: o.bus, observer: o.observer, deadlines: o.deadlines,
		events: o.events, discovery: &o.discovery, storage: &o.storage, roster: o.roster, pub: o.pub,
		remove: o.remove, loopCtx: o.loopCtx, stopping: o.stopping, stopped: &o.stopped,
	}}
	o.link = &replicaLink{core: o.core, roster: o.roster, reconcileEntries: o.rec.reconcileEntries}
	o.pipe = &replyPipeline{core: o.core, roster: o.roster, pub: o.pub, slots: make(chan struct{}, replyConcurrency)}
	o.discovery = discovery{log: o.log, inProcess: cfg.Tools, agents: cfg.agentList(), once: &o.once, warnings: advertWarnings{log: o.log, grace: cfg.AdvertGrace}}
	o.storage.log = o.log
	if err := o.roster.buildAgents(); err != nil {
		return nil, err
	}
	o.pipe.commits = groupCommit{linger: cfg.ReplyLinger, commit: o.pipe.applyGroup,
		current: func(ctx context.Context, id string) (*conversation.State, uint64, error) {
			return o.store.current(ctx, id)
		}}
	o.pub.unserved = newUnservedCalls(o.runCtx, o.bus, o.events, o.log, o.clock, func(tool string) {
		o.observer.unservedCall(tool)
	})
	return o, nil
}

// Start binds the conversations' stream and buckets, starts consuming replies and the expiry and
// reconcile loops, and reconciles once: batches that completed or expired
// while no replica was up are handled, runs whose lease expired are
// relaunched.
func (o *Orchestrator) Start(ctx context.Context) (err error) {
	if !o.started.CompareAndSwap(false, true) {
		return errors.New("orchestrator already started")
	}
	go o.events.loop()
	defer func() {
		if err != nil {
			o.events.stop(ctx)
		}
	}()
	st, err := o.openStore(ctx)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	o.store = st
	owned, err := o.pipe.newOwnership(ctx, o.link.kv)
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	o.fx = newEffector(o.effectorParams(st))
	o.rec.store, o.rec.fx = st, o.fx
	o.runner.store, o.runner.fx = st, o.fx
	st.onTooLarge = o.fx.failTooLarge
	o.storage.probe = indexProbe(st.index, o.clock)
	// Pending calls are counted from the store when scraped rather than
	// by this process: the state lives only in the logs, so the count is
	// right after a restart and whichever replica settled a call, and
	// every replica reports the same total.
	o.cfg.Metrics.CountPending(countPending(o.Pending))
	var tools []string
	for _, a := range o.roster.agents {
		for _, t := range a.cfg.Tools {
			if !slices.Contains(tools, t.Name) {
				tools = append(tools, t.Name)
			}
		}
	}
	o.cfg.Metrics.Known(o.roster.names, tools)
	// The subscriptions live until Stop, not as long as ctx.
	if err := o.pipe.consumeReplies(o.runCtx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	// Calls no worker could finish are failed, so their runs do not hang.
	md, err := o.bus.HandleMaxDeliveries(o.runCtx, bus.MaxDeliveriesConfig{WorkerID: o.cfg.InstanceID})
	if err != nil {
		_ = o.pipe.replies.Stop(ctx)
		return fmt.Errorf("start: %w", err)
	}
	o.pipe.maxDeliver = md
	if err := o.runner.subscribeCancels(); err != nil {
		_ = o.pipe.replies.Stop(ctx)
		_ = o.pipe.maxDeliver.Stop(ctx)
		return fmt.Errorf("start: %w", err)
	}
	if err := o.link.subscribeNudges(); err != nil {
		_ = o.pipe.replies.Stop(ctx)
		_ = o.pipe.maxDeliver.Stop(ctx)
		_ = o.runner.cancelSub.Unsubscribe()
		return fmt.Errorf("start: %w", err)
	}
	if err := o.serveApprovalStatus(o.loopCtx); err != nil {
		o.log.WarnContext(ctx, "approval status: approvers cannot ask what is pending", slog.String("error", err.Error()))
	}
	// Before the first reconcile: which conversations are this replica's
	// depends on what the others run.
	if err := o.link.advertise(ctx); err != nil {
		o.log.WarnContext(ctx, "replica advert: the next refresh will try again", slog.String("error", err.Error()))
	}
	o.pipe.own(ctx, owned)
	o.discovery.watch(ctx, o.bus)
	// The first pass lists what is due now, before a run can start, so that
	// it never takes a run of this process for one left undone; its reads go
	// on in the background.
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	first, err := o.store.due(lctx)
	cancel()
	if err != nil {
		o.log.WarnContext(ctx, "reconcile at start: the next pass will try again", slog.String("error", err.Error()))
	}
	o.loops.Go(o.rec.expiryLoop)
	o.loops.Go(o.link.advertiseLoop)
	o.loops.Go(o.link.indexLoop)
	o.loops.Go(func() { o.rec.reconcileLoop(first) })
	o.loops.Go(o.rec.retentionLoop)
	o.loops.Go(o.streamsLoop)
	o.loops.Go(o.grantsLoop)
	o.log.InfoContext(ctx, "orchestrator started", slog.Any("agents", o.roster.names), slog.Int("tools", len(tools)))
	return nil
}

// openStore binds the conversations' stream and index.
func (o *Orchestrator) openStore(ctx context.Context) (*store, error) {
	if _, err := o.bus.JetStream().Stream(ctx, bus.StreamConversations); err != nil {
		return nil, fmt.Errorf("stream %s: %w", bus.StreamConversations, err)
	}
	index, err := o.bus.KeyValue(ctx, bus.BucketIndex)
	if err != nil {
		return nil, err
	}
	replicas, err := o.bus.KeyValue(ctx, bus.BucketReplicas)
	if err != nil {
		return nil, err
	}
	o.link.kv = replicas
	s := &store{
		bus: o.bus, index: index, fresh: newFreshSet(), instance: o.cfg.InstanceID,
		cache:    newReportingCache(o.cfg.StateCacheBytes, newEvictionReport(o.log, o.cfg.Metrics.StateCacheEvicted, o.clock)),
		clock:    o.clock,
		observer: o.observer,
		life:     o.loopCtx, log: o.log, unresolved: func() { o.observer.appendUnresolved() }, appendTimeout: o.cfg.appendTimeout,
	}
	// The floor of the first conversations' watermark (fresh.go).
	last, err := o.bus.LastSequence(ctx, bus.StreamConversations)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", bus.StreamConversations, err)
	}
	s.fresh.saw(last)
	return s, nil
}

// Stop ends the orchestrator: it stops consuming replies and its loops, then
// waits for runs in progress until ctx ends; runs still going then are
// cancelled and their leases released, so that another replica (or the next
// start) relaunches them. It does not close the connection.
func (o *Orchestrator) Stop(ctx context.Context) error {
	var err error
	o.stopOnce.Do(func() {
		o.runner.launchMu.Lock()
		o.stopped.Store(true)
		o.runner.launchMu.Unlock()
		close(o.stopping)
		if o.stopLoops != nil {
			o.stopLoops()
		}
		if o.runner.cancelSub != nil {
			_ = o.runner.cancelSub.Unsubscribe()
		}
		o.link.unsubscribeNudges()
		err = errors.Join(err, o.pipe.stopOwned(ctx))
		for _, sub := range []*bus.Subscription{o.pipe.replies, o.pipe.maxDeliver} {
			if sub != nil {
				if serr := sub.Drain(ctx); serr != nil {
					err = errors.Join(err, serr)
				}
			}
		}
		o.loops.Wait()
		o.discovery.stop()
		done := make(chan struct{})
		go func() { o.runner.runs.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			err = errors.Join(err, fmt.Errorf("stop: runs still going: %w", ctx.Err()))
			o.cancel()
			<-done
		}
		o.cancel()
		o.pub.unserved.stop()
		o.link.withdraw(ctx)
		if o.started.Load() {
			// Runs are over: what they emitted is published before Stop
			// returns.
			o.events.stop(ctx)
		}
	})
	return err
}

// Health reports whether the orchestrator is serving and its store has
// room (see storageState.health).
func (o *Orchestrator) Health(ctx context.Context) error {
	if o.stopped.Load() {
		return ErrStopped
	}
	if !o.started.Load() {
		return errors.New("orchestrator not started")
	}
	if err := o.cfg.serverWriteError(); err != nil {
		return err
	}
	if err := o.streams.health(); err != nil {
		return err
	}
	return o.storage.health(ctx)
}

// InstanceID is the id of this replica (Config.InstanceID).
func (o *Orchestrator) InstanceID() string { return o.cfg.InstanceID }

// Agents lists the names of the agents this replica runs, in the order
// they were configured.
func (o *Orchestrator) Agents() []string { return slices.Clone(o.roster.names) }

// Catalogue is what workers advertise, as this orchestrator sees it; nil
// before Start (or when the bucket could not be watched).
func (o *Orchestrator) Catalogue() *Catalogue { return o.discovery.catalogue }

// RunInfo is the answer about one run.
type RunInfo struct {
	RunID          string              `json:"run_id"`
	ConversationID string              `json:"conversation_id"`
	Status         conversation.Status `json:"status"`
}

// Run returns a run's status.
func (o *Orchestrator) Run(ctx context.Context, runID string) (RunInfo, error) {
	convID, err := o.store.conversationOf(ctx, runID)
	if err != nil {
		return RunInfo{}, err
	}
	c, _, err := o.store.get(ctx, convID)
	if err != nil {
		return RunInfo{}, err
	}
	rec := c.RunRecord(runID)
	if rec == nil {
		if c.Batch != nil && c.Batch.PromptRunID == runID {
			// A follow-up prompt's run, waiting for its batch.
			return RunInfo{RunID: runID, ConversationID: convID, Status: conversation.StatusQueued}, nil
		}
		return RunInfo{}, fmt.Errorf("run %s: %w", runID, ErrNotFound)
	}
	return RunInfo{RunID: runID, ConversationID: convID, Status: rec.Status}, nil
}

// Conversation returns a conversation's stored state.
func (o *Orchestrator) Conversation(ctx context.Context, id string) (*conversation.State, error) {
	c, _, err := o.store.get(ctx, id)
	return c, err
}

// Pending lists every deferred call still waiting for a reply, across
// the conversations that are not finished.
func (o *Orchestrator) Pending(ctx context.Context) ([]wire.PendingCall, error) {
	due, err := o.store.due(ctx)
	if err != nil {
		return nil, err
	}
	out := []wire.PendingCall{}
	for _, e := range due {
		c, _, err := o.store.get(ctx, e.id)
		if err != nil {
			if errors.Is(err, ErrNotFound) {
				continue
			}
			return nil, err
		}
		out = append(out, c.PendingCalls()...)
	}
	return out, nil
}

// countPending counts the deferred calls pending lists, by tool and kind,
// for the pending gauge.
func countPending(pending func(context.Context) ([]wire.PendingCall, error)) func(context.Context) ([]telemetry.PendingCount, error) {
	return func(ctx context.Context) ([]telemetry.PendingCount, error) {
		calls, err := pending(ctx)
		if err != nil {
			return nil, err
		}
		return countByTool(calls), nil
	}
}

// countByTool counts calls by tool and kind, in the order met.
func countByTool(pending []wire.PendingCall) []telemetry.PendingCount {
	type key struct{ tool, kind string }
	n := map[key]int{}
	var order []key
	for _, p := range pending {
		k := key{p.ToolName, p.Kind}
		if _, ok := n[k]; !ok {
			order = append(order, k)
		}
		n[k]++
	}
	out := make([]telemetry.PendingCount, 0, len(order))
	for _, k := range order {
		out = append(out, telemetry.PendingCount{Tool: k.tool, Kind: k.kind, N: n[k]})
	}
	return out
}

// effectorParams are the effector's collaborators in this orchestrator.
func (o *Orchestrator) effectorParams(st *store) effectorParams {
	return effectorParams{
		log: o.log, clock: o.clock, store: st, events: o.events, deadlines: o.deadlines,
		observer: o.observer,
		owner:    o.cfg.InstanceID, leaseTTL: o.cfg.LeaseTTL, newID: o.cfg.NewID, mine: o.roster.take,
		followUpID:   o.pipe.followUpRunID,
		notifyCancel: o.bus.PublishCancel,
		withdraw:     o.withdraw,
		escalate:     o.rec.escalate,
		batchDone:    o.pub.batchDone,
		launch:       o.runner.launchFrom,
		claimWindow:  o.cfg.ClaimWindow,
		runCtx:       o.runCtx,
		reapply: func(ctx context.Context, convID string, jobs []*replyJob) {
			o.pipe.applyGroup(ctx, convID, jobs, nil, 0)
		},
		handOver:            o.link.handOver,
		spawn:               o.runner.goUnlessStopped,
		track:               o.runner.runs.Go,
		audit:               o.auditGrants,
		publishPaused:       o.pub.publishPaused,
		publishBatch:        o.pub.publishBatch,
		replied:             o.pipe.replyEvents,
		publishDispatched:   o.pub.publishDispatched,
		dispatchUnpublished: o.cfg.dispatchUnpublished,
		onRunEnd:            o.cfg.OnRunEnd,
	}
}
