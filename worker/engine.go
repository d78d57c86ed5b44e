package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/telemetry/natstrace"
	"github.com/toolgate/toolgate/internal/worker/callctx"
	"github.com/toolgate/toolgate/wire"
)

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

// serve is Run once the worker is marked running.
func (w *Worker) serve(ctx context.Context) error {
	// The subscriptions outlive ctx so that calls in flight can finish; they
	// end through Drain below.
	subCtx, cancelSubs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSubs()

	// Subscribed before the first call is fetched, so that no notice is
	// missed for a call in hand. Without it calls run to their end.
	if csub, err := w.bus.SubscribeCancels(w.cancels.cancel); err != nil {
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
	if !w.cfg.NoAdvertise {
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
	t.Handler = w.wrap(t.Handler)
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
		sub, err := w.bus.ConsumeCalls(actx, t.Name, cfg, h)
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
				slog.String("tool", t.Name), slog.Int("attempt", attempt), slog.Duration("retry_in", pause), slog.Any("error", err))
			pause = min(pause*2, consumeRetryMax)
		case errors.Is(err, bus.ErrConsumerMissing):
			// This user may not make call_<tool> (or put back a filter
			// changed under it): the orchestrator makes it before the
			// tool's first call, which is then taken within a second.
			wait = consumeMissingEvery
			if !waiting {
				waiting = true
				w.log.InfoContext(ctx, "waiting for the tool's call consumer, which the orchestrator makes", slog.String("tool", t.Name), slog.Any("reason", err))
			}
		default:
			w.log.WarnContext(ctx, "cannot start consuming calls yet; retrying", slog.String("tool", t.Name),
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
	// Drain cancels the handlers' context when it times out; handlers
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
	c := &callRun{w: w, tool: t.Name, d: d, outcome: OutcomeFailed, took: -1}
	c.log = w.log.With(slog.String("tool", c.tool), slog.String("run_id", req.RunID),
		slog.String("tool_call_id", req.ToolCallID), slog.Uint64("delivered", d.NumDelivered))
	ctx, c.span = natstrace.StartRequest(ctx, w.tracer, d.Subject, d.Header, natstrace.Request{
		RunID: req.RunID, ConversationID: req.ConversationID, ToolCallID: req.ToolCallID,
		Tool: c.tool, Attempt: req.Attempt, Delivered: d.NumDelivered,
	}, attribute.String("toolgate.worker_id", w.cfg.ID))
	defer c.span.End()
	ctx = callctx.WithProgress(ctx, func() { _ = d.InProgress() })
	if d.NumDelivered > 1 {
		w.cfg.Metrics.Redelivered(c.tool)
	}
	if !w.takeSlot(ctx) {
		c.span.SetAttributes(natstrace.AttrOutcome.String(OutcomeInterrupted))
		w.cfg.Metrics.CallSkipped(c.tool, OutcomeInterrupted)
		w.release(c.log, d, 0)
		return nil
	}
	defer func() { <-w.slots }()

	// Every path below sets c.outcome (and c.took, when the handler ran).
	w.cfg.Metrics.CallStarted(c.tool)
	defer func() {
		w.cfg.Metrics.CallFinished(c.tool, c.outcome, c.took)
		c.span.SetAttributes(natstrace.AttrOutcome.String(c.outcome))
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
	reply, ok := c.execute(ctx, t.Handler)
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
	c.outcome = OutcomeCancelled
	c.log.InfoContext(ctx, "conversation cancelled; call stopped without a reply")
	if err := c.d.Ack(); err != nil {
		c.log.WarnContext(ctx, "ack", slog.Any("error", err))
	}
}

// execute runs the call, or answers it "timed out" if its deadline has
// passed. It reports false when it ended the delivery itself (the call was
// cancelled, handed back, or is to be delivered again) and there is no
// reply to send.
func (c *callRun) execute(ctx context.Context, h Handler) (wire.CallReply, bool) {
	req := c.d.Msg
	if !req.Deadline.IsZero() && !c.w.cfg.Clock().Before(req.Deadline) {
		c.outcome = OutcomeExpired
		c.log.InfoContext(ctx, "deadline passed before the call ran")
		return wire.CallReply(failed(callctx.TimedOutMessage)), true
	}
	start := time.Now()
	r, err := run(ctx, h, req)
	c.took = time.Since(start)
	switch {
	case err == nil:
		c.log.InfoContext(ctx, "call executed", slog.String("outcome", string(r.Outcome)), slog.Duration("took", c.took))
		return r, true
	case cancelled(ctx):
		c.stopCancelled(ctx)
	case ctx.Err() != nil:
		// The worker is shutting down: another worker can run it now.
		c.outcome = OutcomeInterrupted
		c.log.Warn("call interrupted by shutdown; handing it back", slog.Any("error", err))
		c.w.release(c.log, c.d, 0)
	default:
		c.later(ctx, OutcomeError, "executor error", err)
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
		reply = wire.CallReply(failed(fmt.Sprintf("invalid tool result: %v", err)))
		reply.RunID, reply.ToolCallID, reply.WorkerID = req.RunID, req.ToolCallID, id
	}
	if r, ok := reply.WithinLimit(); !ok {
		// Sending it whole would cost a large message for nothing.
		c.log.WarnContext(ctx, "result too large; sending a failed result instead", slog.Int("bytes", reply.PayloadBytes()), slog.Int("limit", wire.MaxReplyBytes))
		reply = r
	}
	if c.outcome != OutcomeExpired {
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
	natstrace.Inject(ctx, hdr)
	// The result exists now; publish it even if shutdown began meanwhile.
	pubCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.w.cfg.PublishTimeout)
	defer cancel()
	if _, err := c.w.bus.PublishCallReply(pubCtx, reply, hdr); err != nil {
		c.later(ctx, OutcomePublishError, "publish reply", err)
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

// run runs a call's handler within the call's deadline and turns the
// answer forms (Retry, Fail, a deadline passed) into replies. Call and
// Reply are wire.CallRequest and wire.CallReply field for field, so the
// conversions below stop compiling when the wire gains a field they lack.
func run(ctx context.Context, h Handler, call wire.CallRequest) (wire.CallReply, error) {
	ctx, cancel := callctx.WithDeadline(ctx, call.Deadline)
	defer cancel()
	r, err := h.Handle(ctx, Call(call))
	r, err = answer(ctx, r, err)
	return wire.CallReply(r), err
}

func answer(ctx context.Context, r Reply, err error) (Reply, error) {
	var ae *answerError
	switch {
	case err == nil:
		if r.Outcome == "" {
			r.Outcome = wire.OutcomeReturn
		}
		return r, nil
	case errors.As(err, &ae):
		return Reply{Outcome: ae.outcome, Message: ae.msg}, nil
	case callctx.TimedOut(ctx):
		return failed(callctx.TimedOutMessage), nil
	}
	return Reply{}, err
}

// failed is a reply with outcome failed.
func failed(msg string) Reply { return Reply{Outcome: wire.OutcomeFailed, Message: msg} }

// wrap puts the middleware around h, the first added outermost.
func (w *Worker) wrap(h Handler) Handler {
	w.mu.Lock()
	mw := w.mw
	w.mu.Unlock()
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}
