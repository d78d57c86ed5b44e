package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/wire"
)

// Tool is one tool a worker serves.
type Tool struct {
	// Spec names the tool (required) and, for the toolgate_tools
	// advertisement, describes it; Description and Parameters may be empty.
	Spec ToolSpec
	// Executor runs the tool's calls; required.
	Executor Executor
	// Kind names the executor in the advertisement: "exec", "http",
	// "builtin". Defaults to "custom".
	Kind string
}

// Config configures a Worker.
type Config struct {
	// Bus is the connection to JetStream; required. The streams must have
	// been set up (bus.Setup). The worker does not close it.
	Bus *bus.Bus
	// Tools are the tools served, each on its durable call_<tool>; at least
	// one, names unique.
	Tools []Tool
	// ID identifies this worker in replies. Defaults to <hostname>-<pid>.
	ID string
	// Concurrency bounds the calls running at once across all tools.
	// Defaults to 4.
	Concurrency int
	// AckWait of the call consumers: a call whose worker sends no ack nor
	// in-progress within it is delivered again. In-progress acks go out
	// every AckWait/3 while a call runs. Defaults to 30s. The consumers are
	// shared, so every worker of a tool should use the same value.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries of a call; then the orchestrator's
	// max-deliveries handler fails it. Defaults to 5.
	MaxDeliver int
	// BackOff are the delays before a call whose executor hit an
	// infrastructure error is delivered again, by delivery number (the last
	// entry repeats). Defaults to 1s, 5s, 30s, 2m.
	BackOff []time.Duration
	// DrainTimeout bounds how long Run waits, once its context ends, for
	// calls in flight to finish; calls still running then are cancelled and
	// handed back for redelivery. Defaults to 30s.
	DrainTimeout time.Duration
	// PublishTimeout bounds the publication of one reply (the bus retries
	// within it). Defaults to 10s.
	PublishTimeout time.Duration
	// Advertise puts the tools in the toolgate_tools bucket and renews them
	// every AdvertiseEvery while the worker runs. Off by default.
	Advertise bool
	// AdvertiseEvery is how often advertisements are renewed; keep it well
	// under the bucket's TTL. Defaults to 30s.
	AdvertiseEvery time.Duration
	// ConsumerCheckEvery is how often each call_<tool>'s configuration on
	// the server is compared with the worker's: a change by another client
	// is logged as an error by the bus, counted (Bus.ConsumerDrifts) and
	// put back if the worker's user may. Defaults to 30s.
	ConsumerCheckEvery time.Duration
	// Logger receives the worker's log. nil discards it.
	Logger *slog.Logger
	// Clock is the clock for deadlines. Defaults to time.Now.
	Clock func() time.Time
	// Metrics counts calls by tool and outcome, their run time, calls in
	// flight and redeliveries. nil records nothing.
	Metrics *telemetry.WorkerMetrics
	// TracerProvider makes one span per call, child of the trace context
	// in the call's headers; the reply carries the span's context. Defaults
	// to the global provider (no-op unless telemetry.Setup installed one;
	// the trace context then passes through unchanged).
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	if c.ID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "worker"
		}
		c.ID = host + "-" + strconv.Itoa(os.Getpid())
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = 5
	}
	if len(c.BackOff) == 0 {
		c.BackOff = bus.DefaultBackOff()
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.AdvertiseEvery <= 0 {
		c.AdvertiseEvery = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	for i := range c.Tools {
		if c.Tools[i].Kind == "" {
			c.Tools[i].Kind = "custom"
		}
	}
	return c
}

func (c Config) validate() error {
	if c.Bus == nil {
		return errors.New("bus is nil")
	}
	if len(c.Tools) == 0 {
		return errors.New("no tools to serve")
	}
	seen := map[string]bool{}
	for _, t := range c.Tools {
		if err := wire.ValidateToken("tool name", t.Spec.Name); err != nil {
			return err
		}
		if seen[t.Spec.Name] {
			return fmt.Errorf("tool %s is listed twice", t.Spec.Name)
		}
		seen[t.Spec.Name] = true
		if t.Executor == nil {
			return fmt.Errorf("tool %s has no executor", t.Spec.Name)
		}
		if len(t.Spec.Parameters) > 0 && !json.Valid(t.Spec.Parameters) {
			return fmt.Errorf("tool %s: parameters are not valid JSON", t.Spec.Name)
		}
	}
	for _, d := range c.BackOff {
		if d < 0 {
			return errors.New("negative back-off delay")
		}
	}
	return nil
}

// Worker serves tool calls from JetStream. Create it with New and run it
// with Run.
type Worker struct {
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer
	slots  chan struct{} // one token per running call

	mu       sync.Mutex
	running  bool
	stopping chan struct{} // closed when draining begins
	inflight int           // handlers running
	idle     chan struct{} // closed when inflight drops to 0, if someone waits

	// Tools added while running (AddTool, addtool.go).
	dyn dynamicTools
	// cancels stops calls of cancelled conversations (cancel.go).
	cancels cancels
	// withdrawals skips calls withdrawn after their delivery (withdrawn.go).
	withdrawals withdrawals
}

func (w *Worker) enter() {
	w.mu.Lock()
	w.inflight++
	w.mu.Unlock()
}

func (w *Worker) leave() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight--
	if w.inflight == 0 && w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
}

// whenIdle is closed once no handler runs.
func (w *Worker) whenIdle() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{})
	if w.inflight == 0 {
		close(ch)
		return ch
	}
	if w.idle == nil {
		w.idle = ch
	}
	return w.idle
}

// New checks cfg and returns a worker.
func New(cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("worker config: %w", err)
	}
	cfg.Tools = append([]Tool(nil), cfg.Tools...)
	cfg.BackOff = append([]time.Duration(nil), cfg.BackOff...)
	return &Worker{
		cfg:    cfg,
		log:    cfg.Logger.With(slog.String("component", "worker"), slog.String("worker_id", cfg.ID)),
		tracer: telemetry.Tracer(cfg.TracerProvider),
		slots:  make(chan struct{}, cfg.Concurrency),
		dyn:    dynamicTools{readvertise: make(chan struct{}, 1)},
	}, nil
}

// ID is the worker id set on replies.
func (w *Worker) ID() string { return w.cfg.ID }

// Run serves calls until ctx ends, then drains: it stops fetching, lets the
// calls in flight finish within DrainTimeout, and hands back (naks) those
// that do not, so no call is lost. It returns nil after a clean drain. A
// worker runs once.
//
// At start, a consumer that cannot be created for a transient reason (a
// cluster electing a leader, streams not set up yet) is retried with
// back-off until it can or ctx ends; ending ctx then is a clean stop. A
// permission error or a rejected configuration ends Run at once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("worker: already run")
	}
	w.running = true
	w.stopping = make(chan struct{})
	w.mu.Unlock()

	// The subscriptions outlive ctx so that calls in flight can finish; they
	// end through Drain below.
	subCtx, cancelSubs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSubs()

	// Subscribed before the first call is fetched, so that no notice is
	// missed for a call in hand. Without it calls run to their end.
	if csub, err := w.cfg.Bus.SubscribeCancels(w.cancels.cancel); err != nil {
		w.log.WarnContext(ctx, "cancel notices unavailable; calls of cancelled conversations run to their end", slog.Any("error", err))
	} else {
		defer func() { _ = csub.Unsubscribe() }()
	}

	var subs []*bus.Subscription
	for _, t := range w.toolList() {
		sub, err := w.consume(ctx, subCtx, t)
		if err != nil {
			close(w.stopping)
			if derr := w.drain(subs); derr != nil {
				w.log.Warn("drain after a failed start", slog.Any("error", derr))
			}
			if ctx.Err() != nil && (!errors.Is(err, bus.ErrPermissionDenied) || errors.Is(err, bus.ErrConsumerMissing)) {
				// Stopped while still starting: not a failure of the worker.
				return nil
			}
			return fmt.Errorf("worker: %w", err)
		}
		subs = append(subs, sub)
	}
	w.started(ctx, subCtx, subs)
	w.log.InfoContext(ctx, "serving", slog.Int("tools", len(subs)), slog.Int("concurrency", w.cfg.Concurrency))

	var adv sync.WaitGroup
	advCtx, stopAdv := context.WithCancel(ctx)
	if w.cfg.Advertise {
		adv.Go(func() { w.advertise(advCtx) })
	}

	<-ctx.Done()
	stopAdv()
	adv.Wait()
	w.mu.Lock()
	close(w.stopping)
	subs = w.dyn.subs
	w.mu.Unlock()
	w.log.Info("draining")
	return w.drain(subs)
}

// Bounds of the pause between attempts to create a tool's consumer.
const (
	consumeRetryMin = 250 * time.Millisecond
	consumeRetryMax = 5 * time.Second
	// consumeMissingEvery is how often a worker that may not make its
	// call consumer looks whether it exists yet.
	consumeMissingEvery = time.Second
)

// consume starts the consumer of t's calls, bound to subCtx. A transient
// failure (bus.Transient), such as a timeout while a cluster elects a
// leader or streams that are not set up yet, is logged and retried with
// growing pauses until ctx ends; any other error, such as a permission
// error, is returned at once.
func (w *Worker) consume(ctx, subCtx context.Context, t Tool) (*bus.Subscription, error) {
	cfg := bus.ConsumeConfig{
		AckWait:        w.cfg.AckWait,
		MaxDeliver:     w.cfg.MaxDeliver,
		BackOff:        w.cfg.BackOff,
		Concurrency:    w.cfg.Concurrency,
		AutoInProgress: true,
		CheckEvery:     w.cfg.ConsumerCheckEvery,
	}
	h := bus.HandlerFunc[wire.CallRequest](func(hctx context.Context, d *bus.Delivery[wire.CallRequest]) error {
		return w.handle(hctx, t, d)
	})
	pause := consumeRetryMin
	waiting := false
	for attempt := 1; ; attempt++ {
		// The attempt ends with ctx, so that Run stops promptly; once the
		// consumer runs, only subCtx governs it.
		actx, cancel := context.WithCancel(subCtx)
		unbind := context.AfterFunc(ctx, cancel)
		sub, err := w.cfg.Bus.ConsumeCalls(actx, t.Spec.Name, cfg, h)
		if err == nil {
			unbind()
			// If ctx ended meanwhile, cancel has stopped the consumer (or
			// will): its calls in flight are cancelled without waiting
			// for DrainTimeout, and handed back to another worker.
			return sub, nil
		}
		unbind()
		cancel()
		if ctx.Err() != nil {
			return nil, err
		}
		full := noRoom(err)
		if !bus.Transient(err) && !full {
			return nil, err
		}
		wait := pause
		switch {
		case full:
			// Room comes back when an operator frees some (or the server's
			// store is reopened): not a reason for the worker to exit.
			w.log.WarnContext(ctx, "no room on the NATS server for the call consumer (its JetStream storage or disk is full); retrying",
				slog.String("tool", t.Spec.Name), slog.Int("attempt", attempt), slog.Duration("retry_in", pause), slog.Any("error", err))
			pause = min(pause*2, consumeRetryMax)
		case errors.Is(err, bus.ErrConsumerMissing):
			// This user may not make call_<tool> (or put back a filter
			// changed under it): the orchestrator makes it before the
			// tool's first call, which is then taken within a second.
			wait = consumeMissingEvery
			if !waiting {
				waiting = true
				w.log.InfoContext(ctx, "waiting for the tool's call consumer, which the orchestrator makes", slog.String("tool", t.Spec.Name), slog.Any("reason", err))
			}
		default:
			w.log.WarnContext(ctx, "cannot start consuming calls yet; retrying", slog.String("tool", t.Spec.Name),
				slog.Int("attempt", attempt), slog.Duration("retry_in", pause), slog.Any("error", err))
			pause = min(pause*2, consumeRetryMax)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, err
		case <-timer.C:
		}
	}
}

// noRoom reports whether err says that the server could not store the
// consumer for want of room: a full JetStream storage limit, or a full
// disk, on which nats-server answers only that it could not create the
// consumer's store.
func noRoom(err error) bool {
	return bus.StorageFull(err) || strings.Contains(err.Error(), "error creating store for consumer")
}

// drain stops the subscriptions, waiting for their handlers up to
// DrainTimeout; handlers still running then have their context cancelled,
// hand their call back and are waited for.
func (w *Worker) drain(subs []*bus.Subscription) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.DrainTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, s := range subs {
		wg.Go(func() {
			if err := s.Drain(ctx); err != nil {
				w.log.Warn("drain timed out; cancelling calls in flight", slog.Any("error", err))
			}
		})
	}
	wg.Wait()
	// Drain cancels the handlers' context when it times out; executors
	// return soon after, and their calls are nak'd before the handler ends.
	done := w.whenIdle()
	grace := time.NewTimer(w.cfg.PublishTimeout + 5*time.Second)
	defer grace.Stop()
	select {
	case <-done:
		w.log.Info("drained")
		return nil
	case <-grace.C:
		return errors.New("worker: calls still running after drain")
	}
}

// handle runs one call. It ends the delivery itself (ack, nak) so that
// nothing is left for after the drain.
func (w *Worker) handle(ctx context.Context, t Tool, d *bus.Delivery[wire.CallRequest]) error {
	w.enter()
	defer w.leave()
	req := d.Msg
	c := &callRun{w: w, tool: t.Spec.Name, d: d, outcome: telemetry.CallOutcomeFailed, took: -1}
	c.log = w.log.With(slog.String("tool", c.tool), slog.String("run_id", req.RunID),
		slog.String("tool_call_id", req.ToolCallID), slog.Uint64("delivered", d.NumDelivered))
	ctx, c.span = telemetry.StartRequest(ctx, w.tracer, d.Subject, d.Header, telemetry.Request{
		RunID: req.RunID, ConversationID: req.ConversationID, ToolCallID: req.ToolCallID,
		Tool: c.tool, Attempt: req.Attempt, Delivered: d.NumDelivered,
	}, attribute.String("toolgate.worker_id", w.cfg.ID))
	defer c.span.End()
	ctx = withProgress(ctx, func() { _ = d.InProgress() })
	if d.NumDelivered > 1 {
		w.cfg.Metrics.Redelivered(c.tool)
	}
	if !w.takeSlot(ctx) {
		c.span.SetAttributes(telemetry.AttrOutcome.String(telemetry.CallOutcomeInterrupted))
		w.cfg.Metrics.CallSkipped(c.tool, telemetry.CallOutcomeInterrupted)
		w.release(c.log, d, 0)
		return nil
	}
	defer func() { <-w.slots }()

	// Every path below sets c.outcome (and c.took, when the executor ran).
	w.cfg.Metrics.CallStarted(c.tool)
	defer func() {
		w.cfg.Metrics.CallFinished(c.tool, c.outcome, c.took)
		c.span.SetAttributes(telemetry.AttrOutcome.String(c.outcome))
	}()
	ctx, release, live := w.cancels.register(ctx, req.RunID)
	defer release()
	if !live {
		c.stopCancelled(ctx)
		return nil
	}
	if w.withdrawals.withdrawn(ctx, c) {
		c.stopWithdrawn(ctx)
		return nil
	}
	reply, ok := c.execute(ctx, t.Executor)
	if ok {
		c.publish(ctx, c.seal(ctx, reply))
	}
	return nil
}

// takeSlot waits for room to run a call, unless the worker is stopping
// (or ctx ends) first: then the call is to be handed back unrun. Waiting
// keeps the call: AutoInProgress covers the wait.
func (w *Worker) takeSlot(ctx context.Context) bool {
	select {
	case <-w.stopping:
		return false
	default:
	}
	select {
	case w.slots <- struct{}{}:
		return true
	case <-w.stopping:
	case <-ctx.Done():
	}
	return false
}

// callRun is one call being handled: what handle's steps share.
type callRun struct {
	w    *Worker
	tool string
	d    *bus.Delivery[wire.CallRequest]
	log  *slog.Logger
	span trace.Span
	// outcome and took are what the call is counted as.
	outcome string
	took    time.Duration
}

// stopCancelled ends a call of a cancelled conversation without a reply.
func (c *callRun) stopCancelled(ctx context.Context) {
	c.outcome = telemetry.CallOutcomeCancelled
	c.log.InfoContext(ctx, "conversation cancelled; call stopped without a reply")
	if err := c.d.Ack(); err != nil {
		c.log.WarnContext(ctx, "ack", slog.Any("error", err))
	}
}

// execute runs the call, or answers it "timed out" if its deadline has
// passed. It reports false when it ended the delivery itself (the call was
// cancelled, handed back, or is to be delivered again) and there is no
// reply to send.
func (c *callRun) execute(ctx context.Context, ex Executor) (wire.CallReply, bool) {
	req := c.d.Msg
	if !req.Deadline.IsZero() && !c.w.cfg.Clock().Before(req.Deadline) {
		c.outcome = telemetry.CallOutcomeExpired
		c.log.InfoContext(ctx, "deadline passed before the call ran")
		return Failed(TimedOutMessage), true
	}
	start := time.Now()
	r, err := ex.Execute(ctx, req)
	c.took = time.Since(start)
	switch {
	case err == nil:
		c.log.InfoContext(ctx, "call executed", slog.String("outcome", string(r.Outcome)), slog.Duration("took", c.took))
		return r, true
	case cancelled(ctx):
		c.stopCancelled(ctx)
	case ctx.Err() != nil:
		// The worker is shutting down: another worker can run it now.
		c.outcome = telemetry.CallOutcomeInterrupted
		c.log.Warn("call interrupted by shutdown; handing it back", slog.Any("error", err))
		c.w.release(c.log, c.d, 0)
	default:
		c.later(ctx, telemetry.CallOutcomeError, "executor error", err)
	}
	return wire.CallReply{}, false
}

// later hands the call back to be delivered again after the back-off of
// its delivery count: what failed (what) may pass by then.
func (c *callRun) later(ctx context.Context, outcome, what string, err error) {
	c.outcome = outcome
	c.span.RecordError(err)
	c.span.SetStatus(codes.Error, what)
	delay := c.w.backoff(c.d.NumDelivered)
	c.log.WarnContext(ctx, what+"; redelivering the call later", slog.Any("error", err), slog.Duration("delay", delay))
	c.w.release(c.log, c.d, delay)
}

// seal addresses the reply to its call and replaces one that is invalid
// or over the size limit by a failed result saying so.
func (c *callRun) seal(ctx context.Context, reply wire.CallReply) wire.CallReply {
	req, id := c.d.Msg, c.w.cfg.ID
	reply.RunID, reply.ToolCallID, reply.WorkerID = req.RunID, req.ToolCallID, id
	if err := reply.Validate(); err != nil {
		c.log.WarnContext(ctx, "executor gave an invalid reply", slog.Any("error", err))
		reply = Failed("invalid tool result: %v", err)
		reply.RunID, reply.ToolCallID, reply.WorkerID = req.RunID, req.ToolCallID, id
	}
	if r, ok := reply.WithinLimit(); !ok {
		// Sending it whole would cost a large message for nothing.
		c.log.WarnContext(ctx, "result too large; sending a failed result instead", slog.Int("bytes", reply.PayloadBytes()), slog.Int("limit", wire.MaxReplyBytes))
		reply = r
	}
	if c.outcome != telemetry.CallOutcomeExpired {
		c.outcome = string(reply.Outcome)
	}
	if reply.Outcome == wire.OutcomeFailed {
		c.span.SetStatus(codes.Error, "tool call failed")
	}
	return reply
}

// publish sends the reply and then acks the call; a reply that cannot be
// published hands the call back for a later delivery.
func (c *callRun) publish(ctx context.Context, reply wire.CallReply) {
	hdr := nats.Header{}
	hdr.Set(wire.HeaderConversation, c.d.Msg.ConversationID)
	// The reply continues the call's trace, so that the follow-up run the
	// orchestrator starts from it joins the same trace.
	telemetry.Inject(ctx, hdr)
	// The result exists now; publish it even if shutdown began meanwhile.
	pubCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.w.cfg.PublishTimeout)
	defer cancel()
	if _, err := c.w.cfg.Bus.PublishCallReply(pubCtx, reply, hdr); err != nil {
		c.later(ctx, telemetry.CallOutcomePublishError, "publish reply", err)
		return
	}
	if err := c.d.Ack(); err != nil {
		// The reply is stored; a redelivery will publish a duplicate that the
		// stream drops by its id.
		c.log.WarnContext(ctx, "ack", slog.Any("error", err))
	}
}

func (w *Worker) release(log *slog.Logger, d *bus.Delivery[wire.CallRequest], delay time.Duration) {
	if err := d.NakWithDelay(delay); err != nil {
		log.Warn("nak", slog.Any("error", err))
	}
}

func (w *Worker) backoff(numDelivered uint64) time.Duration {
	return bus.BackOffDelay(w.cfg.BackOff, numDelivered)
}
