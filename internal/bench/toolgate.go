package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing/fstest"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/worker"
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
// clock. Completion is seen by watching the runs bucket.
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
	calls := make([]map[string]any, batch)
	for i := range calls {
		calls[i] = map[string]any{"tool": sampleTool, "id": fmt.Sprintf("call_%03d", i), "args": json.RawMessage(sampleArgs)}
	}
	script, err := json.Marshal([]map[string]any{{"calls": calls}, {"text": "Done."}})
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"model":        map[string]any{"provider": "script", "name": "bench", "script": "script.json"},
		"instructions": "Use the tools as asked.",
		"tools": []map[string]any{{
			"name": sampleTool, "description": "Return the arguments unchanged.",
			"parameters": json.RawMessage(`{"type":"object"}`),
		}},
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	a, err := orchestrator.ParseAgentConfig(data, true, fstest.MapFS{"script.json": {Data: script}})
	if err != nil {
		return nil, fmt.Errorf("bench agent config: %w", err)
	}
	return a, nil
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

	mu      sync.Mutex
	waiting map[string]chan *orchestrator.Conversation
	watchWG sync.WaitGroup
	bg      failure
}

// setUp starts toolgate with an orchestrator that runs up to maxRuns runs at
// once: as many as the conversations the case keeps in flight, as the
// baseline gives each of its conversations a goroutine (the default, 16,
// would queue the runs of a window of 100 single-call conversations).
func (t *ToolgateTarget) setUp(ctx context.Context, batch, maxRuns int) (r *rig, err error) {
	r = &rig{t: t, waiting: map[string]chan *orchestrator.Conversation{}}
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
		// Emptied, not deleted: nats-server removes a deleted stream's store
		// in the background, and the next case's Setup creating one of the
		// same name at once can fail ("error creating store for stream").
		js := b.JetStream()
		names := []string{}
		for _, sc := range (bus.SetupConfig{}).StreamConfigs() {
			names = append(names, sc.Name)
		}
		for _, kc := range (bus.SetupConfig{}).KeyValueConfigs() {
			names = append(names, "KV_"+kc.Bucket)
		}
		for _, name := range names {
			s, err := js.Stream(dctx, name)
			if err != nil {
				continue
			}
			for cname := range s.ConsumerNames(dctx).Name() {
				_ = s.DeleteConsumer(dctx, cname)
			}
			_ = s.Purge(dctx)
		}
		b.Close()
	})
	if err := b.Setup(ctx, bus.SetupConfig{}); err != nil {
		return r, fmt.Errorf("toolgate: %w", err)
	}
	if r.convs, err = b.JetStream().Stream(ctx, bus.StreamConversations); err != nil {
		return r, fmt.Errorf("toolgate: runs bucket: %w", err)
	}
	agentCfg, err := agentConfig(batch)
	if err != nil {
		return r, err
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
	o, err := orchestrator.New(orchestrator.Config{
		Bus: ob, EventBus: eb, Agent: agentCfg, Logger: t.env.Logger(), MaxConcurrentRuns: max(maxRuns, 16),
	})
	if err != nil {
		closeConns()
		return r, fmt.Errorf("toolgate: %w", err)
	}
	if err := o.Start(ctx); err != nil {
		closeConns()
		return r, fmt.Errorf("toolgate: start orchestrator: %w", err)
	}
	r.orch = o
	r.stops = append(r.stops, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = o.Stop(sctx)
		closeConns()
	})
	return r, r.watch(ctx)
}

// startWorkers runs n tool-workers serving noop, one call at a time each.
func (r *rig) startWorkers(ctx context.Context, n int) error {
	builtin, err := worker.NewBuiltin(r.t.env.sandbox())
	if err != nil {
		return fmt.Errorf("toolgate: %w", err)
	}
	var spec worker.ToolSpec
	for _, s := range worker.BuiltinTools() {
		if s.Name == sampleTool {
			spec = s
		}
	}
	for i := range n {
		name := fmt.Sprintf("bench-worker-%d", i)
		wb, err := r.t.env.Connect(ctx, name)
		if err != nil {
			return err
		}
		r.conns = append(r.conns, wb)
		w, err := worker.New(worker.Config{
			Bus: wb, ID: name, Concurrency: 1, DrainTimeout: 5 * time.Second, Logger: r.t.env.Logger(),
			Tools: []worker.Tool{{Spec: spec, Executor: builtin, Kind: "builtin"}},
		})
		if err != nil {
			wb.Close()
			return fmt.Errorf("toolgate: %w", err)
		}
		wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		r.stops = append(r.stops, func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
			}
			wb.Close()
		})
	}
	return nil
}

// watch follows the conversations' events and hands every finished
// conversation to whoever waits for it. It listens to the events on a
// plain subscription and reads a conversation once, when it has finished,
// so that the harness adds as little as possible to the load it measures
// (a watch of the runs bucket would receive every rewrite of every
// conversation).
func (r *rig) watch(ctx context.Context) error {
	subj, err := bus.EventSubject("x")
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sub, err := r.bus.Conn().Subscribe(strings.TrimSuffix(subj, "x")+"*", func(m *nats.Msg) {
		events, err := bus.DecodeEvents(m.Data, m.Header)
		if err != nil {
			r.bg.set(fmt.Errorf("decode event on %s: %w", m.Subject, err))
			return
		}
		for _, ev := range events {
			if ev.Type == orchestrator.EventRunCompleted || ev.Type == orchestrator.EventRunFailed {
				r.finished(rctx, ev.ConversationID)
			}
		}
	})
	if err != nil {
		cancel()
		return fmt.Errorf("toolgate: subscribe to events: %w", err)
	}
	// The subscription ends first, before the orchestrator and the bus.
	r.stops = append([]func(){func() {
		_ = sub.Unsubscribe()
		cancel()
		r.watchWG.Wait()
	}}, r.stops...)
	return nil
}

// finished hands a finished conversation to whoever waits for it.
func (r *rig) finished(ctx context.Context, convID string) {
	r.mu.Lock()
	ch, ok := r.waiting[convID]
	delete(r.waiting, convID)
	r.mu.Unlock()
	if !ok {
		return
	}
	r.watchWG.Add(1)
	go func() {
		defer r.watchWG.Done()
		c, err := r.orch.Conversation(ctx, convID)
		if err != nil {
			r.bg.set(fmt.Errorf("read finished conversation %s: %w", convID, err))
			return
		}
		ch <- c
	}()
}

func (r *rig) tearDown(ctx context.Context) {
	// Workers and the orchestrator stop before the connection that deletes
	// the streams; the watcher stops first of all.
	for i := len(r.stops) - 1; i >= 1; i-- {
		r.stops[i]()
	}
	if len(r.stops) > 0 {
		r.stops[0]()
	}
}

// start begins one conversation and returns a channel that receives it
// once finished.
func (r *rig) start(ctx context.Context) (string, <-chan *orchestrator.Conversation, error) {
	// The id is known only once StartRun returns, by which time the
	// conversation may have finished and its update gone by unclaimed; so
	// after registering, a conversation already finished is read directly.
	info, err := r.orch.StartRun(ctx, benchPrompt, "")
	if err != nil {
		return "", nil, fmt.Errorf("start run: %w", err)
	}
	ch := make(chan *orchestrator.Conversation, 1)
	r.mu.Lock()
	r.waiting[info.ConversationID] = ch
	r.mu.Unlock()
	if c, err := r.orch.Conversation(ctx, info.ConversationID); err == nil && c.Status.Terminal() {
		r.mu.Lock()
		_, still := r.waiting[info.ConversationID]
		delete(r.waiting, info.ConversationID)
		r.mu.Unlock()
		if still {
			ch <- c
		}
	}
	return info.ConversationID, ch, nil
}

// followUpLatency is the time from the first run pausing to the follow-up
// starting.
func followUpLatency(c *orchestrator.Conversation) (time.Duration, error) {
	if c.Status != orchestrator.StatusCompleted {
		return 0, fmt.Errorf("conversation %s %s: %s", c.ID, c.Status, c.Error)
	}
	if len(c.Runs) < 2 || c.Runs[0].EndedAt.IsZero() {
		return 0, fmt.Errorf("conversation %s completed without a pause (%d runs)", c.ID, len(c.Runs))
	}
	return c.Runs[1].StartedAt.Sub(c.Runs[0].EndedAt), nil
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
	)
	g, gctx := errgroup.WithContext(ctx)
	st := r.orch.Stats()
	writes0, bytes0, stalls0 := st.StateWrites.Load(), st.StateBytes.Load(), r.stalledPulls()
	events0, eventBytes0, err := r.eventsStored(ctx)
	if err != nil {
		return Measurement{}, err
	}
	start := time.Now()
	for range c.Conversations() {
		g.Go(func() error {
			var lat []time.Duration
			for next.Add(1) <= int64(n) {
				id, ch, err := r.start(gctx)
				if err != nil {
					return err
				}
				conv, err := r.await(gctx, id, ch)
				if err != nil {
					return err
				}
				d, err := followUpLatency(conv)
				if err != nil {
					return err
				}
				for range c.Batch {
					lat = append(lat, d)
				}
			}
			mu.Lock()
			latencies = append(latencies, lat...)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Measurement{}, err
	}
	m := Measurement{Calls: len(latencies), Elapsed: time.Since(start), Latency: Summarize(latencies), Stalls: r.stalledPulls() - stalls0}
	if m.Calls > 0 {
		m.StateWrites = float64(st.StateWrites.Load()-writes0) / float64(m.Calls)
		m.StateBytes = float64(st.StateBytes.Load()-bytes0) / float64(m.Calls)
		// Events are published in the background; those of the last
		// conversations may not be in yet, a negligible share.
		if events, eventBytes, err := r.eventsStored(ctx); err == nil {
			m.Events = float64(events-events0) / float64(m.Calls)
			m.EventBytes = float64(eventBytes-eventBytes0) / float64(m.Calls)
		}
	}
	return m, nil
}

func (r *rig) stalledPulls() int64 {
	var n int64
	for _, b := range r.conns {
		n += b.StalledPulls()
	}
	return n
}

// eventsStored is the number of events stored and their bytes.
func (r *rig) eventsStored(ctx context.Context) (msgs, bytes uint64, err error) {
	st, err := r.bus.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		return 0, 0, fmt.Errorf("toolgate: events stream: %w", err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("toolgate: events stream: %w", err)
	}
	return info.State.Msgs, info.State.Bytes, nil
}

func (r *rig) await(ctx context.Context, id string, ch <-chan *orchestrator.Conversation) (*orchestrator.Conversation, error) {
	timer := time.NewTimer(conversationTimeout)
	defer timer.Stop()
	select {
	case c := <-ch:
		return c, nil
	case <-r.bg.failed():
		return nil, r.bg.get()
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		c, err := r.orch.Conversation(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("conversation %s not finished after %s: %w", id, conversationTimeout, err)
		}
		return nil, fmt.Errorf("conversation %s not finished after %s: status %s, %d runs", id, conversationTimeout, c.Status, len(c.Runs))
	}
}

// RunMemory pauses c.Conversations conversations with no worker running,
// measures the heap they cost (live heap after a GC, against the same
// before the first; the harness's own share is one id string each) and the
// runs bucket's bytes per conversation, then publishes one reply per
// conversation, as workers would, and measures the time until every
// conversation has finished its follow-up (MetricResumeSeconds).
func (t *ToolgateTarget) RunMemory(ctx context.Context, c MemoryCase) (MemoryMeasurement, error) {
	n := c.Conversations
	if n < 1 {
		return MemoryMeasurement{}, errors.New("toolgate memory: conversations must be at least 1")
	}
	r, err := t.setUp(ctx, 1, memoryStarters)
	if err != nil {
		return MemoryMeasurement{}, err
	}
	defer r.tearDown(ctx)

	heapBefore := heapAfterGC()
	ids := make([]string, n)
	sem := make(chan struct{}, memoryStarters)
	g, gctx := errgroup.WithContext(ctx)
	for i := range n {
		sem <- struct{}{}
		g.Go(func() error {
			defer func() { <-sem }()
			info, err := r.orch.StartRun(gctx, benchPrompt, "")
			ids[i] = info.ConversationID
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return MemoryMeasurement{}, fmt.Errorf("toolgate memory: start runs: %w", err)
	}
	if _, err := r.waitPaused(ctx, ids, false); err != nil {
		return MemoryMeasurement{}, err
	}
	heapPer := float64(int64(heapAfterGC())-int64(heapBefore)) / float64(n)
	info, err := r.convs.Info(ctx)
	if err != nil {
		return MemoryMeasurement{}, fmt.Errorf("toolgate memory: stream info: %w", err)
	}
	storePer := float64(info.State.Bytes) / float64(n)

	chans := make([]<-chan *orchestrator.Conversation, n)
	r.mu.Lock()
	for i, id := range ids {
		ch := make(chan *orchestrator.Conversation, 1)
		r.waiting[id] = ch
		chans[i] = ch
	}
	r.mu.Unlock()
	replies, err := r.waitPaused(ctx, ids, true)
	if err != nil {
		return MemoryMeasurement{}, err
	}
	start := time.Now()
	for i := 0; i < len(replies); i += pipelineDepth {
		if err := r.bus.PublishBatch(ctx, replies[i:min(i+pipelineDepth, len(replies))]); err != nil {
			return MemoryMeasurement{}, fmt.Errorf("toolgate memory: publish replies: %w", err)
		}
	}
	for i, ch := range chans {
		conv, err := r.await(ctx, ids[i], ch)
		if err != nil {
			return MemoryMeasurement{}, fmt.Errorf("toolgate memory: %w", err)
		}
		if _, err := followUpLatency(conv); err != nil {
			return MemoryMeasurement{}, fmt.Errorf("toolgate memory: %w", err)
		}
	}
	return MemoryMeasurement{
		Conversations: n,
		Figures: map[string]float64{
			MetricHeapPerConversation:  heapPer,
			MetricStorePerConversation: storePer,
			MetricResumeSeconds:        time.Since(start).Seconds(),
		},
	}, nil
}

// waitPaused waits until every conversation is paused with its calls
// published and, if replies, returns the reply a worker would send to each
// call.
func (r *rig) waitPaused(ctx context.Context, ids []string, replies bool) ([]bus.Outgoing, error) {
	var out []bus.Outgoing
	deadline := time.Now().Add(conversationTimeout + time.Duration(len(ids))*time.Millisecond)
	for _, id := range ids {
		for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
			c, err := r.orch.Conversation(ctx, id)
			if err != nil {
				return nil, fmt.Errorf("toolgate memory: %w", err)
			}
			if c.Status == orchestrator.StatusPaused && c.Batch != nil && allPublished(c.Batch) {
				for _, pc := range c.Batch.Calls {
					if !replies {
						break
					}
					msg, err := bus.CallReplyMessage(bus.CallReply{
						RunID: c.Batch.RunID, ToolCallID: pc.ToolCallID, Outcome: bus.OutcomeReturn,
						Value: pc.Args, WorkerID: "bench-worker-0",
					})
					if err != nil {
						return nil, err
					}
					out = append(out, msg)
				}
				break
			}
			if c.Status.Terminal() || time.Now().After(deadline) {
				return nil, fmt.Errorf("toolgate memory: conversation %s is %s, not paused", id, c.Status)
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return out, nil
}

func allPublished(b *orchestrator.Batch) bool {
	for _, pc := range b.Calls {
		if !pc.Published {
			return false
		}
	}
	return len(b.Calls) > 0
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
