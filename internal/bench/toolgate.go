package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing/fstest"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
	"golang.org/x/sync/errgroup"
)

// ErrOrchestratorUnavailable is reported by a toolgate side that cannot
// drive the orchestrator; the harness then records the baseline alone and
// leaves every toolgate figure and ratio null.
var ErrOrchestratorUnavailable = errors.New("toolgate target: orchestrator not available")

// conversationTimeout bounds the wait for one conversation to finish.
const conversationTimeout = 2 * time.Minute

// memoryStarters is how many conversations the memory case starts at once.
const memoryStarters = 64

const benchPrompt = "Add the release notes task to my todo list."

// ToolgateTarget is the toolgate side of every case: conversations driven
// through the orchestrator's Go API on env's server, with the offline
// script model. Each conversation's first run calls the built-in noop tool
// c.Batch times and pauses; c.Workers tool-workers (worker.Builtin, one call
// at a time each, like the baseline's) answer; the follow-up run ends the
// conversation with a text answer.
//
// A call's latency runs from its run pausing (RunRecord.EndedAt, stored
// just before the batch is published) to its follow-up run starting
// (the follow-up's RunRecord.StartedAt); both come from the orchestrator's
// clock. The harness learns of run ends from the orchestrator's OnRunEnd
// hook, in process: it reads nothing from the store and decodes no event
// while it measures.
//
// Run and RunMemory set up toolgate's streams and buckets and delete them
// afterwards, so one Env serves one toolgate run at a time.
type ToolgateTarget struct {
	env *Env
}

// NewToolgateTarget returns the toolgate side on env.
func NewToolgateTarget(env *Env) *ToolgateTarget { return &ToolgateTarget{env: env} }

// Name is "toolgate".
func (t *ToolgateTarget) Name() string { return "toolgate" }

// agentConfig is an agent whose model calls noop batch times, then answers.
func agentConfig(batch int) (*orchestrator.AgentConfig, error) {
	script, err := agentScript(batch)
	if err != nil {
		return nil, err
	}
	return scriptAgent(script, sampleTool)
}

// agentJSON is agentConfig's script and config files.
func agentJSON(batch int) (script, cfg []byte, err error) {
	a, err := agentScript(batch)
	if err != nil {
		return nil, nil, err
	}
	if script, err = json.Marshal(a); err != nil {
		return nil, nil, err
	}
	cfg, err = agentFile(sampleTool)
	return script, cfg, err
}

// agentScript is agentConfig's script.
func agentScript(batch int) ([]agent.ScriptResponse, error) {
	calls := make([]agent.ScriptCall, batch)
	for i := range calls {
		calls[i] = agent.ScriptCall{Tool: sampleTool, ID: fmt.Sprintf("call_%03d", i), Args: json.RawMessage(sampleArgs)}
	}
	return []agent.ScriptResponse{{Calls: calls}, {Text: "Done."}}, nil
}

// agentFile is the config file of an agent that plays script.json with
// the built-in tools named.
func agentFile(tools ...string) ([]byte, error) {
	var specs []worker.ToolSpec
	for _, s := range worker.BuiltinTools() {
		if slices.Contains(tools, s.Name) {
			specs = append(specs, s)
		}
	}
	cfg := map[string]any{
		"model":        map[string]any{"provider": "script", "name": "bench", "script": "script.json"},
		"instructions": "Use the tools as asked.",
		"tools":        specs,
	}
	return json.Marshal(cfg)
}

// scriptAgent is an agent that plays script with the built-in tools named.
func scriptAgent(script []agent.ScriptResponse, tools ...string) (*orchestrator.AgentConfig, error) {
	data, err := json.Marshal(script)
	if err != nil {
		return nil, err
	}
	cfgData, err := agentFile(tools...)
	if err != nil {
		return nil, err
	}
	a, err := agentconfig.Parse(cfgData, fstest.MapFS{"script.json": {Data: data}})
	if err != nil {
		return nil, fmt.Errorf("bench agent config: %w", err)
	}
	return a, nil
}

// runEnd is what the harness keeps of a run's end (the orchestrator's
// OnRunEnd): a few figures, never the conversation itself.
type runEnd struct {
	id     string
	status conversation.Status
	err    string
	runs   int
	// pausedAt and resumedAt are the first run's end and the second's
	// start: a call's latency.
	pausedAt, resumedAt time.Time
	// endedAt is the end of the run that ended.
	endedAt time.Time
	// historyBytes is the JSON size of the history, measured only for a
	// finished conversation of a rig that asks for it.
	historyBytes int
}

// rig is toolgate set up on the env's server.
type rig struct {
	t    *ToolgateTarget
	orch *orchestrator.Orchestrator
	bus  *bus.Bus
	// conns are the connections of the system under test, whose stalled
	// pulls the measurement reports.
	conns []*bus.Bus
	convs jetstream.Stream
	stops []func()
	stats *orchestrator.Counts

	// paused, when set, receives the end of every run that paused; it
	// is set before the first conversation starts.
	paused func(runEnd)
	// measureHistory makes finished conversations' runEnd carry
	// historyBytes.
	measureHistory bool

	mu   sync.Mutex
	ends map[string]chan runEnd
	bg   failure
}

// rigConfig shapes a rig.
type rigConfig struct {
	agent *orchestrator.AgentConfig
	// maxRuns is the orchestrator's MaxConcurrentRuns (at least 16).
	maxRuns int
	// cacheBytes is the orchestrator's StateCacheBytes; 0 its default.
	cacheBytes int64
}

// setUp starts toolgate with an orchestrator that runs up to maxRuns runs at
// once: as many as the conversations the case keeps in flight, as the
// baseline gives each of its conversations a goroutine (the default, 16,
// would queue the runs of a window of 100 single-call conversations).
func (t *ToolgateTarget) setUp(ctx context.Context, batch, maxRuns int) (*rig, error) {
	a, err := agentConfig(batch)
	if err != nil {
		return nil, err
	}
	return t.setUpWith(ctx, rigConfig{agent: a, maxRuns: maxRuns})
}

func (t *ToolgateTarget) setUpWith(ctx context.Context, rc rigConfig) (r *rig, err error) {
	r = &rig{t: t, ends: map[string]chan runEnd{}}
	defer func() {
		if err != nil {
			r.tearDown(ctx)
			r = nil
		}
	}()
	b, err := t.env.Connect(ctx, "bench-toolgate")
	if err != nil {
		return r, err
	}
	r.bus = b
	r.stops = append(r.stops, func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		// Deleted, with their consumers; the next case's Setup creates
		// them again (the env keeps the server from removing the directory
		// under it: Env.holdStreamsDir).
		js := b.JetStream()
		for _, name := range toolgateStreams() {
			_ = js.DeleteStream(dctx, name)
		}
		b.Close()
	})
	if err := b.Setup(ctx, bus.SetupConfig{}); err != nil {
		return r, fmt.Errorf("toolgate: %w", err)
	}
	if r.convs, err = b.JetStream().Stream(ctx, bus.StreamConversations); err != nil {
		return r, fmt.Errorf("toolgate: conversations stream: %w", err)
	}
	ob, err := t.env.Connect(ctx, "bench-orchestrator")
	if err != nil {
		return r, err
	}
	// Events on their own connection, as cmd/orchestrator runs it.
	eb, err := t.env.Connect(ctx, "bench-orchestrator-events")
	if err != nil {
		ob.Close()
		return r, err
	}
	r.conns = append(r.conns, ob, eb)
	closeConns := func() {
		ob.Close()
		eb.Close()
	}
	o, err := t.env.sys.Orchestrator(ctx, "bench-orchestrator", orchestrator.Config{
		Bus: ob, EventBus: eb, Agent: rc.agent, Logger: t.env.Logger(), MaxConcurrentRuns: max(rc.maxRuns, 16),
		OnRunEnd: r.onRunEnd, Retention: benchRetention, StateCacheBytes: rc.cacheBytes,
	})
	if err != nil {
		closeConns()
		return r, fmt.Errorf("toolgate: %w", err)
	}
	r.orch, r.stats = o.Orchestrator, o.Counts
	r.stops = append(r.stops, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = o.Stop(sctx)
		closeConns()
	})
	return r, nil
}

// perReplicaStreams are written per orchestrator replica as time passes,
// whatever the load: its advert, renewed every third of a lease (0.1
// message a second at the default 30 s). A stored message per call counts
// what a call costs; these are shown apart, per second.
var perReplicaStreams = map[string]bool{"KV_" + bus.BucketReplicas: true}

// toolgateStreams names every stream of toolgate's set-up, the buckets'
// included.
func toolgateStreams() []string {
	var names []string
	for _, sc := range (bus.SetupConfig{}).StreamConfigs() {
		names = append(names, sc.Name)
	}
	for _, kc := range (bus.SetupConfig{}).KeyValueConfigs() {
		names = append(names, "KV_"+kc.Bucket)
	}
	return names
}

// startWorkers runs n tool-workers serving noop, one call at a time each.
func (r *rig) startWorkers(ctx context.Context, n int, tools ...string) error {
	if len(tools) == 0 {
		tools = []string{sampleTool}
	}
	served, err := testkit.BuiltinTools(r.t.env.sandbox(), tools...)
	if err != nil {
		return fmt.Errorf("toolgate: %w", err)
	}
	for i := range n {
		name := fmt.Sprintf("bench-worker-%d", i)
		p, err := r.t.env.sys.Worker(ctx, name, worker.Config{
			ID: name, Concurrency: 1, DrainTimeout: 5 * time.Second, Logger: r.t.env.Logger(), Tools: served,
		})
		if err != nil {
			return fmt.Errorf("toolgate: %w", err)
		}
		r.conns = append(r.conns, p.Bus)
		r.stops = append(r.stops, func() { _ = p.Stop(context.WithoutCancel(ctx)) })
	}
	return nil
}

// onRunEnd is the orchestrator's OnRunEnd: it keeps a few figures of the
// run's end and hands a finished conversation's to whoever waits for it.
func (r *rig) onRunEnd(c *conversation.State) {
	e := runEnd{id: c.ID, status: c.Status, err: c.Error, runs: len(c.Runs)}
	if n := len(c.Runs); n > 0 {
		e.endedAt = c.Runs[n-1].EndedAt
	}
	if len(c.Runs) >= 2 {
		e.pausedAt, e.resumedAt = c.Runs[0].EndedAt, c.Runs[1].StartedAt
	}
	if !c.Status.Terminal() {
		if f := r.paused; f != nil && c.Status == conversation.StatusPaused {
			f(e)
		}
		return
	}
	if r.measureHistory {
		if b, err := json.Marshal(c.History); err == nil {
			e.historyBytes = len(b)
		}
	}
	select {
	case r.endOf(c.ID) <- e:
	default:
		r.bg.set(fmt.Errorf("conversation %s finished twice", c.ID))
	}
}

// endOf is the channel that receives conversation id's end, made by
// whichever of the waiter and the end comes first.
func (r *rig) endOf(id string) chan runEnd {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch, ok := r.ends[id]
	if !ok {
		ch = make(chan runEnd, 1)
		r.ends[id] = ch
	}
	return ch
}

func (r *rig) tearDown(ctx context.Context) {
	// Workers and the orchestrator stop before the connection that deletes
	// the streams.
	for i := len(r.stops) - 1; i >= 0; i-- {
		r.stops[i]()
	}
}

// start begins one conversation.
func (r *rig) start(ctx context.Context) (orchestrator.RunInfo, error) {
	info, err := r.orch.StartRun(ctx, benchPrompt, "")
	if err != nil {
		return info, fmt.Errorf("start run: %w", err)
	}
	return info, nil
}

// followUpLatency is the time from the first run pausing to the follow-up
// starting.
func followUpLatency(e runEnd) (time.Duration, error) {
	if e.status != conversation.StatusCompleted {
		return 0, fmt.Errorf("conversation %s %s: %s", e.id, e.status, e.err)
	}
	if e.runs < 2 || e.pausedAt.IsZero() {
		return 0, fmt.Errorf("conversation %s completed without a pause (%d runs)", e.id, e.runs)
	}
	return e.resumedAt.Sub(e.pausedAt), nil
}

// Run measures one case on a fresh set-up.
func (t *ToolgateTarget) Run(ctx context.Context, c Case) (Measurement, error) {
	if err := c.validate(); err != nil {
		return Measurement{}, fmt.Errorf("toolgate: %w", err)
	}
	r, err := t.setUp(ctx, c.Batch, c.Conversations())
	if err != nil {
		return Measurement{}, err
	}
	defer r.tearDown(ctx)
	if err := r.startWorkers(ctx, c.Workers); err != nil {
		return Measurement{}, err
	}
	if w := c.WarmupBatches(); w > 0 {
		if _, err := r.drive(ctx, c, w); err != nil {
			return Measurement{}, fmt.Errorf("toolgate %s warm-up: %w", c.Name(), err)
		}
	}
	m, err := r.drive(ctx, c, c.Batches())
	if err != nil {
		return Measurement{}, fmt.Errorf("toolgate %s: %w", c.Name(), err)
	}
	return m, nil
}

// drive runs n conversations, c.Conversations() at a time.
func (r *rig) drive(ctx context.Context, c Case, n int) (Measurement, error) {
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, n*c.Batch)
		done      = make([]time.Time, 0, n)
	)
	g, gctx := errgroup.WithContext(ctx)
	st := r.stats
	writes0, bytes0, reads0, ends0 := st.StateWrites.Load(), st.StateBytes.Load(), st.StateReads.Load(), st.EndWrites.Load()
	stalls0 := r.stalledPulls()
	states0, err := streamStates(ctx, r.bus, toolgateStreams())
	if err != nil {
		return Measurement{}, err
	}
	alloc0, cpu0 := allocated(), cpuUsed()
	start := time.Now()
	for range c.Conversations() {
		g.Go(func() error {
			var (
				lat []time.Duration
				at  []time.Time
			)
			for next.Add(1) <= int64(n) {
				info, err := r.start(gctx)
				if err != nil {
					return err
				}
				e, err := r.await(gctx, info.ConversationID)
				if err != nil {
					return err
				}
				at = append(at, time.Now())
				d, err := followUpLatency(e)
				if err != nil {
					return err
				}
				for range c.Batch {
					lat = append(lat, d)
				}
			}
			mu.Lock()
			latencies = append(latencies, lat...)
			done = append(done, at...)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Measurement{}, err
	}
	m := Measurement{Calls: len(latencies), Elapsed: time.Since(start), Latency: Summarize(latencies), Stalls: r.stalledPulls() - stalls0,
		AllocBytes: allocatedPer(alloc0, len(latencies)), CPU: cpuPer(cpu0, len(latencies))}
	m.Gap = longestGap(start, done)
	if m.Calls > 0 {
		calls := float64(m.Calls)
		m.StateWrites = float64(st.StateWrites.Load()-writes0) / calls
		m.StateBytes = float64(st.StateBytes.Load()-bytes0) / calls
		m.RoundTrips = float64(st.StateWrites.Load()-writes0-(st.EndWrites.Load()-ends0)+st.StateReads.Load()-reads0) / float64(n)
		// Events are published in the background; those of the last
		// conversations may not be in yet, a negligible share.
		if states, err := streamStates(ctx, r.bus, toolgateStreams()); err == nil {
			m.Periodic = map[string]float64{}
			for name := range perReplicaStreams {
				if d := states[name].LastSeq - states0[name].LastSeq; d > 0 {
					m.Periodic[name] = float64(d) / m.Elapsed.Seconds()
				}
				delete(states, name)
			}
			m.Stored, m.StoredBytes = storedPer(calls, (bus.SetupConfig{}).StreamConfigs(), states0, states)
			m.Events = m.Stored[wire.StreamEvents]
		}
	}
	return m, nil
}

// quiet waits until toolgate has stored nothing for d (CacheSettle) in
// any stream but the replicas' adverts, whose few bytes a replica renews
// every ten seconds, and so the server has dropped its caches of what was
// written. It fails after quietMax: something that writes on is a fault
// worth seeing, not a figure to take.
func (r *rig) quiet(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	var names []string
	for _, name := range toolgateStreams() {
		if !perReplicaStreams[name] {
			names = append(names, name)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, quietMax)
	defer cancel()
	t := time.NewTicker(quietPoll)
	defer t.Stop()
	var last map[string]uint64
	since := time.Now()
	for {
		states, err := streamStates(ctx, r.bus, names)
		if err != nil {
			return fmt.Errorf("toolgate memory: wait for a quiet store: %w", err)
		}
		seqs := make(map[string]uint64, len(states))
		for name, st := range states {
			seqs[name] = st.LastSeq
		}
		if !maps.Equal(seqs, last) {
			last, since = seqs, time.Now()
		} else if time.Since(since) >= d {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("toolgate memory: still storing after %s: %w", quietMax, ctx.Err())
		}
	}
}

// quietPoll and quietMax are how often quiet looks at the streams, and
// how long it waits at most (paused conversations are marked published by
// reconcile within 30 s of their pause, and then nothing else is due).
const (
	quietPoll = 250 * time.Millisecond
	quietMax  = 3 * time.Minute
)

// streamStates are the states of the named streams: the growth of a
// stream's last sequence over a case is the messages stored meanwhile,
// whether or not they were removed since (a work queue's acknowledged
// calls, a deleted key).
func streamStates(ctx context.Context, b *bus.Bus, names []string) (map[string]jetstream.StreamState, error) {
	out := make(map[string]jetstream.StreamState, len(names))
	for _, name := range names {
		st, err := b.StreamState(ctx, name)
		if err != nil {
			return nil, err
		}
		out[name] = st
	}
	return out, nil
}

// storedPer is what each stream of after stored since before, per call:
// messages (those it stored nothing omitted), and bytes for the streams
// of configs that keep what they store (limits retention: a work queue's
// bytes go as its messages are acknowledged).
func storedPer(calls float64, configs []jetstream.StreamConfig, before, after map[string]jetstream.StreamState) (msgs, bytes map[string]float64) {
	keeps := map[string]bool{}
	for _, sc := range configs {
		keeps[sc.Name] = sc.Retention == jetstream.LimitsPolicy
	}
	msgs, bytes = map[string]float64{}, map[string]float64{}
	for name, st := range after {
		n := st.LastSeq - before[name].LastSeq
		if n == 0 {
			continue
		}
		msgs[name] = float64(n) / calls
		if keeps[name] && st.Bytes > before[name].Bytes {
			bytes[name] = float64(st.Bytes-before[name].Bytes) / calls
		}
	}
	return msgs, bytes
}

func (r *rig) stalledPulls() int64 {
	var n int64
	for _, b := range r.conns {
		n += b.StalledPulls()
	}
	return n
}

// await waits for conversation id to finish.
func (r *rig) await(ctx context.Context, id string) (runEnd, error) {
	return r.awaitFor(ctx, id, conversationTimeout)
}

// awaitFor waits up to timeout for conversation id to finish.
func (r *rig) awaitFor(ctx context.Context, id string, timeout time.Duration) (runEnd, error) {
	ch := r.endOf(id)
	defer func() {
		r.mu.Lock()
		delete(r.ends, id)
		r.mu.Unlock()
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case e := <-ch:
		return e, nil
	case <-r.bg.failed():
		return runEnd{}, r.bg.get()
	case <-ctx.Done():
		return runEnd{}, ctx.Err()
	case <-timer.C:
		// Read only to say why: the case has failed.
		c, err := r.orch.Conversation(ctx, id)
		if err != nil {
			return runEnd{}, fmt.Errorf("conversation %s not finished after %s: %w", id, timeout, err)
		}
		return runEnd{}, fmt.Errorf("conversation %s not finished after %s: status %s, %d runs", id, timeout, c.Status, len(c.Runs))
	}
}

// RunMemory pauses c.Conversations conversations with no worker running,
// measures the heap they cost (heapSlope; the harness's own share is two
// id strings each) and the conversations stream's bytes per conversation, then publishes one reply
// per conversation, as workers would, and measures the time until every
// conversation has finished its follow-up (MetricResumeSeconds). Around
// that it times reconcile passes: one before any conversation is stored,
// the one after every conversation finished (which removes their due
// entries) and the next ones, with c.Conversations finished conversations
// stored. Nothing is read from the store: the pauses and ends come from
// OnRunEnd, the replies from the ids StartRun returned and the script.
func (t *ToolgateTarget) RunMemory(ctx context.Context, c MemoryCase) (MemoryMeasurement, error) {
	n := c.Conversations
	if n < 1 {
		return MemoryMeasurement{}, errors.New("toolgate memory: conversations must be at least 1")
	}
	// Finer heap samples than the default 512 KiB, so that the estimate of
	// toolgate's own heap holds at a thousand conversations; only until
	// that is measured, as sampling costs the allocation-heavy resume a few
	// per cent, which raw's is not charged.
	defaultRate := runtime.MemProfileRate
	defer func() { runtime.MemProfileRate = defaultRate }()
	runtime.MemProfileRate = memProfileRate
	r, err := t.setUp(ctx, 1, memoryStarters)
	if err != nil {
		return MemoryMeasurement{}, err
	}
	defer r.tearDown(ctx)

	none, noneReq, _, err := r.timeReconcile(ctx, reconcilePasses)
	if err != nil {
		return MemoryMeasurement{}, err
	}

	// Each half is paused, its events published (the events of the last
	// steps wait a quarter of a second at most for a follow-up that would
	// join them: transient, not what a paused conversation costs), and
	// then the store left until quiet: the index puts a conversation's
	// entry a tick after it paused, reconcile marks its calls published a
	// pass after that (or later), and the server holds the copies of those
	// writes for a while too.
	ids, runs := make([]string, n), make([]string, n)
	hold := func(from, to int) error {
		someIDs, someRuns, err := r.pauseAll(ctx, to-from)
		if err != nil {
			return err
		}
		copy(ids[from:], someIDs)
		copy(runs[from:], someRuns)
		return r.eventsPublished(ctx)
	}
	quiet := func(ctx context.Context) error { return r.quiet(ctx, c.Settle) }
	atPause, settled, ownPer, err := heapSlope(ctx, n, hold, quiet, r.heapBetweenPasses, toolgateHeap)
	if err != nil {
		return MemoryMeasurement{}, err
	}
	runtime.MemProfileRate = defaultRate
	info, err := r.convs.Info(ctx)
	if err != nil {
		return MemoryMeasurement{}, fmt.Errorf("toolgate memory: stream info: %w", err)
	}
	storePer := float64(info.State.Bytes) / float64(n)

	replies, err := answers(runs)
	if err != nil {
		return MemoryMeasurement{}, err
	}
	reads0, writes0 := r.stats.StateReads.Load(), r.stats.StateWrites.Load()
	alloc0 := allocated()
	resume, err := r.resumeAll(ctx, ids, replies)
	if err != nil {
		return MemoryMeasurement{}, err
	}
	resumeAlloc := allocatedPer(alloc0, n)
	resumeReads := float64(r.stats.StateReads.Load()-reads0) / float64(n)
	resumeWrites := float64(r.stats.StateWrites.Load()-writes0) / float64(n)

	entries, err := r.dueEntries(ctx)
	if err != nil {
		return MemoryMeasurement{}, err
	}
	cleanup, _, _, err := r.timeReconcile(ctx, 1)
	if err != nil {
		return MemoryMeasurement{}, err
	}
	// Timed as the passes with none stored were, on a quiet system: not
	// while the last conversations' events are still going out.
	if err := r.eventsPublished(ctx); err != nil {
		return MemoryMeasurement{}, err
	}
	finished, finishedReq, reads, err := r.timeReconcile(ctx, reconcilePasses)
	if err != nil {
		return MemoryMeasurement{}, err
	}
	page, all, err := r.timeList(ctx, n)
	if err != nil {
		return MemoryMeasurement{}, err
	}
	sweepNone, sweepAll, err := r.timeSweeps(ctx, n)
	if err != nil {
		return MemoryMeasurement{}, err
	}
	return MemoryMeasurement{
		Conversations: n,
		Figures: map[string]float64{
			MetricHeapPerConversation:      settled,
			MetricHeapAtPause:              atPause,
			MetricOrchestratorHeap:         ownPer,
			MetricStorePerConversation:     storePer,
			MetricResumeSeconds:            resume.elapsed.Seconds(),
			MetricResumeAllocBytes:         resumeAlloc,
			MetricResumeReads:              resumeReads,
			MetricResumeWrites:             resumeWrites,
			MetricReconcileNone:            ms(none),
			MetricReconcileFinished:        ms(finished),
			MetricReconcileRequestNone:     ms(noneReq),
			MetricReconcileRequestFinished: ms(finishedReq),
			MetricReconcileGrowth:          inRequests(finished, finishedReq) / inRequests(none, noneReq),
			MetricReconcileCleanup:         ms(cleanup),
			MetricReconcileCleanupEntries:  float64(entries),
			MetricReconcileReads:           reads,
			MetricListPage:                 ms(page),
			MetricListAll:                  float64(all.Microseconds()) / float64(n),
			MetricSweepNone:                ms(sweepNone),
			MetricSweepAll:                 float64(sweepAll.Microseconds()) / float64(n),
		},
		ResumeGap: resume.gap,
	}, nil
}

// pauseAll starts n conversations, memoryStarters at a time, and waits
// until every one has paused on its call; it returns their conversation
// and run ids.
func (r *rig) pauseAll(ctx context.Context, n int) (ids, runs []string, err error) {
	var pausedN atomic.Int64
	allPaused := make(chan struct{})
	r.paused = func(runEnd) {
		if pausedN.Add(1) == int64(n) {
			close(allPaused)
		}
	}
	ids, runs = make([]string, n), make([]string, n)
	sem := make(chan struct{}, memoryStarters)
	g, gctx := errgroup.WithContext(ctx)
	for i := range n {
		sem <- struct{}{}
		g.Go(func() error {
			defer func() { <-sem }()
			info, err := r.start(gctx)
			ids[i], runs[i] = info.ConversationID, info.RunID
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, fmt.Errorf("toolgate memory: %w", err)
	}
	select {
	case <-allPaused:
		return ids, runs, nil
	case <-r.bg.failed():
		return nil, nil, r.bg.get()
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-time.After(conversationTimeout + time.Duration(n)*time.Millisecond):
		return nil, nil, fmt.Errorf("toolgate memory: %d of %d conversations paused", pausedN.Load(), n)
	}
}

// eventsPublished waits until the orchestrator has published every event
// it queued.
func (r *rig) eventsPublished(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(conversationTimeout)
	for r.orch.EventsPending() > 0 {
		select {
		case <-tick.C:
		case <-deadline:
			return fmt.Errorf("toolgate memory: %d events still queued after %s", r.orch.EventsPending(), conversationTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// answers are the replies to each paused run's call, as a worker would
// send them: the agent's one call (agentConfig), answered as noop would.
func answers(runs []string) ([]bus.Outgoing, error) {
	replies := make([]bus.Outgoing, len(runs))
	for i, run := range runs {
		var err error
		if replies[i], err = bus.CallReplyMessage(wire.CallReply{
			RunID: run, ToolCallID: "call_000", Outcome: wire.OutcomeReturn,
			Value: json.RawMessage(sampleArgs), WorkerID: "bench-worker-0",
		}); err != nil {
			return nil, err
		}
	}
	return replies, nil
}

// resumeAll publishes the replies and waits for every conversation's
// follow-up.
func (r *rig) resumeAll(ctx context.Context, ids []string, replies []bus.Outgoing) (resumeRun, error) {
	start := time.Now()
	for i := 0; i < len(replies); i += pipelineDepth {
		if err := r.bus.PublishBatch(ctx, replies[i:min(i+pipelineDepth, len(replies))]); err != nil {
			return resumeRun{}, fmt.Errorf("toolgate memory: publish replies: %w", err)
		}
	}
	done := make([]time.Time, 0, len(ids))
	for _, id := range ids {
		e, err := r.await(ctx, id)
		if err != nil {
			return resumeRun{}, fmt.Errorf("toolgate memory: %w", err)
		}
		if _, err := followUpLatency(e); err != nil {
			return resumeRun{}, fmt.Errorf("toolgate memory: %w", err)
		}
		done = append(done, e.endedAt)
	}
	return resumeRun{elapsed: time.Since(start), gap: longestGap(start, done)}, nil
}

// memProfileRate is the heap sampling rate of the memory case.
const memProfileRate = 32 << 10

// reconcilePasses is how many passes a reconcile figure is the median of:
// a pass with nothing to do is a tenth of a millisecond, which one
// scheduling delay on a busy machine doubles.
const reconcilePasses = 21

// timeReconcile runs n reconcile passes after a collection (the garbage of
// what ran before is not theirs), each just after a bare request (the
// status of the harness's empty reference bucket), and returns the median
// time of a pass and of a request, and the state reads per pass.
func (r *rig) timeReconcile(ctx context.Context, n int) (pass, request time.Duration, reads float64, err error) {
	ref, err := r.referenceBucket(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	runtime.GC()
	passes, requests := make([]time.Duration, n), make([]time.Duration, n)
	reads0 := r.stats.StateReads.Load()
	for i := range n {
		start := time.Now()
		if _, err := ref.Status(ctx); err != nil {
			return 0, 0, 0, fmt.Errorf("toolgate: reference request: %w", err)
		}
		requests[i] = time.Since(start)
		start = time.Now()
		if err := r.orch.Reconcile(ctx); err != nil {
			return 0, 0, 0, fmt.Errorf("toolgate: reconcile: %w", err)
		}
		passes[i] = time.Since(start)
	}
	return Summarize(passes).P50, Summarize(requests).P50, float64(r.stats.StateReads.Load()-reads0) / float64(n), nil
}

// medianPasses is how many times medianTime runs what it times.
const medianPasses = 21

// medianTime runs op medianPasses times, after a collection (the garbage
// of what ran before is not op's), and returns the median time of one.
func medianTime(op func(start time.Time) error) (time.Duration, error) {
	runtime.GC()
	times := make([]time.Duration, medianPasses)
	for i := range times {
		start := time.Now()
		if err := op(start); err != nil {
			return 0, err
		}
		times[i] = time.Since(start)
	}
	return Summarize(times).P50, nil
}

// timeList returns the median time of the first page of 100 of all
// conversations, and the time to list all of them, n, in pages of the
// most a page holds; it fails unless it listed n.
func (r *rig) timeList(ctx context.Context, n int) (page, all time.Duration, err error) {
	page, err = medianTime(func(time.Time) error {
		_, err := r.orch.Conversations(ctx, orchestrator.ListRequest{Limit: 100})
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("toolgate: list: %w", err)
	}
	listed := 0
	start := time.Now()
	for req := (orchestrator.ListRequest{Limit: orchestrator.MaxListLimit}); ; {
		l, err := r.orch.Conversations(ctx, req)
		if err != nil {
			return 0, 0, fmt.Errorf("toolgate: list: %w", err)
		}
		listed += len(l.Conversations)
		if l.NextCursor == "" {
			break
		}
		req.Cursor = l.NextCursor
	}
	all = time.Since(start)
	if listed != n {
		return 0, 0, fmt.Errorf("toolgate: list: %d conversations listed, want %d", listed, n)
	}
	return page, all, nil
}

// benchRetention is the orchestrator's retention in the benchmark: longer
// than any case, so that only the sweeps timed delete.
const benchRetention = time.Hour

// timeSweeps returns the median time of a retention sweep with none of the
// n finished conversations aged, and the time of the sweep that deletes
// all of them (a retention later); it fails unless that one deleted n.
func (r *rig) timeSweeps(ctx context.Context, n int) (none, all time.Duration, err error) {
	none, err = medianTime(func(start time.Time) error {
		_, err := r.orch.Sweep(ctx, start)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("toolgate: sweep: %w", err)
	}
	start := time.Now()
	deleted, err := r.orch.Sweep(ctx, start.Add(benchRetention+time.Minute))
	if err != nil {
		return 0, 0, fmt.Errorf("toolgate: sweep: %w", err)
	}
	all = time.Since(start)
	if deleted != n {
		return 0, 0, fmt.Errorf("toolgate: sweep: %d conversations deleted, want %d", deleted, n)
	}
	return none, all, nil
}

// dueEntries counts the entries of the due index: the messages of its
// bucket, as a removed entry is purged, not marked.
func (r *rig) dueEntries(ctx context.Context) (uint64, error) {
	st, err := r.bus.StreamState(ctx, "KV_"+bus.BucketIndex)
	if err != nil {
		return 0, fmt.Errorf("toolgate: due index: %w", err)
	}
	return st.Msgs, nil
}

// referenceBucket is an empty KV bucket of the harness's own: the status
// of a bucket is the request a reconcile pass with nothing due makes.
func (r *rig) referenceBucket(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := r.bus.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_reference", Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("toolgate: reference bucket: %w", err)
	}
	return kv, nil
}

// inRequests is d in units of request (at least a microsecond).
func inRequests(d, request time.Duration) float64 {
	return float64(d) / float64(max(request, time.Microsecond))
}

// heapPer is the live heap added since before, per conversation of n.
func heapPer(now, before uint64, n int) float64 {
	return float64(int64(now)-int64(before)) / float64(n)
}

// heapBetweenPasses is heapAfterGC taken while no reconcile pass runs: a
// pass holds the index entries of every paused conversation while it goes
// over them (1–2 KB each at 100,000), and a heap taken during one at the
// end or the middle of the memory case read 4.6 or 1.5–1.8 KB per paused
// conversation instead of 2.75 (the periodic pass runs every 15 s, the
// case's quiet waits of 11 s do not avoid it).
func (r *rig) heapBetweenPasses() uint64 {
	st := r.stats
	for {
		started := st.ReconcilesStarted.Load()
		if started != st.ReconcilesEnded.Load() {
			time.Sleep(10 * time.Millisecond) // a pass takes tens of milliseconds to a second
			continue
		}
		heap := heapAfterGC()
		if st.ReconcilesStarted.Load() == started {
			return heap
		}
	}
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// longestGap is the longest time from start through the sorted times in
// done during which nothing completed: a stall of the client or the
// server shows as a gap far longer than a batch takes.
func longestGap(start time.Time, done []time.Time) time.Duration {
	slices.SortFunc(done, func(a, b time.Time) int { return a.Compare(b) })
	var gap time.Duration
	prev := start
	for _, t := range done {
		gap = max(gap, t.Sub(prev))
		prev = t
	}
	return gap
}

// toolgateHeap estimates the live heap allocated by toolgate's own code:
// the in-use bytes of the heap profile's samples with a frame of the module
// outside this harness on their allocation stack (the orchestrator, the
// agent, the bus client and the NATS client under them). The embedded
// server's buffers and caches, which also grow with the conversations
// stored, are allocated on its own goroutines and do not count. The profile
// is as of the last GC: call it after heapAfterGC. It is an estimate from
// samples (runtime.MemProfileRate), scaled as runtime/pprof scales them.
func toolgateHeap() int64 {
	n, _ := runtime.MemProfile(nil, false)
	var recs []runtime.MemProfileRecord
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	rate := float64(runtime.MemProfileRate)
	var total float64
	for i := range recs {
		rec := &recs[i]
		objects, bytes := rec.InUseObjects(), rec.InUseBytes()
		if objects <= 0 || bytes <= 0 || !fromToolgate(rec.Stack()) {
			continue
		}
		scale := 1.0
		if rate > 1 {
			scale = 1 / (1 - math.Exp(-float64(bytes)/float64(objects)/rate))
		}
		total += float64(bytes) * scale
	}
	return int64(total)
}

// fromToolgate says whether a stack has a frame of toolgate's code outside
// this harness.
func fromToolgate(stack []uintptr) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "github.com/toolgate/toolgate/") &&
			!strings.HasPrefix(f.Function, "github.com/toolgate/toolgate/internal/bench.") {
			return true
		}
		if !more {
			return false
		}
	}
}
