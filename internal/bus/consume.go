package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// Handler handles one delivered message. Returning nil acks it (unless the
// handler already acked, nak'd or termed it); returning an error naks it
// with the consumer's back-off delay for this delivery; returning a
// TermError dead-letters and terminates it. A panic is recovered and naks.
type Handler[T any] interface {
	Handle(ctx context.Context, d *Delivery[T]) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc[T any] func(ctx context.Context, d *Delivery[T]) error

// Handle calls f.
func (f HandlerFunc[T]) Handle(ctx context.Context, d *Delivery[T]) error { return f(ctx, d) }

// TermError makes a handler's message a dead letter: it is copied to
// TOOLGATE_DLQ with the error as reason and terminated, never redelivered.
type TermError struct{ Err error }

func (e *TermError) Error() string { return e.Err.Error() }
func (e *TermError) Unwrap() error { return e.Err }

// Terminal wraps err so that the handler's message is dead-lettered.
func Terminal(err error) error { return &TermError{Err: err} }

// ConsumeConfig configures a durable pull consumer and the loops that
// consume it. Zero values take the defaults.
type ConsumeConfig struct {
	// AckWait is how long a delivery may stay unacknowledged before the
	// server delivers it again. Defaults to 30s.
	AckWait time.Duration
	// MaxDeliver bounds deliveries of a message; then the MAX_DELIVERIES
	// advisory fires (see HandleMaxDeliveries). Defaults to 5; -1 is
	// unlimited.
	MaxDeliver int
	// BackOff are the delays before redelivery after a handler error, by
	// delivery number (the last entry repeats). They are applied with
	// NakWithDelay, not as the consumer's server-side BackOff, which would
	// replace AckWait (the ack deadline of delivery n would become
	// BackOff[n-1]) and redeliver long calls that are still running.
	// Defaults to 1s, 5s, 30s, 2m.
	BackOff []time.Duration
	// MaxAckPending bounds unacknowledged deliveries across all consumers
	// of the durable. Defaults to 1000.
	MaxAckPending int
	// PullMaxMessages is the prefetch of each consume loop. ConsumeCalls
	// always uses 1: a prefetched call would age towards AckWait while
	// another runs and then run twice. Defaults to 64 for replies, 16 for
	// approvals.
	PullMaxMessages int
	// Concurrency is the number of consume loops sharing the durable; each
	// runs one handler at a time. Defaults to 1. With Dispatch, it is the
	// number of handlers running at once.
	Concurrency int
	// Dispatch runs one consume loop that hands every message to a handler
	// of its own, up to Concurrency at once (the others wait, unacked, at
	// most MaxAckPending in all), instead of Concurrency loops that each
	// wait for their handler. It suits handlers that wait on one another
	// (the orchestrator's grouped reply writes): a waiting handler then
	// holds no prefetched message behind it.
	Dispatch bool
	// Slots, with Dispatch, bounds the handlers running at once across
	// every consumer given the same channel (its capacity), instead of
	// Concurrency for this one alone: the consumers of one pipeline's
	// partitions share one budget. nil: Concurrency of this consumer's own.
	Slots chan struct{}
	// AutoInProgress sends InProgress every AckWait/3 while a handler
	// runs, so long calls are not redelivered.
	AutoInProgress bool
	// PullExpiry is how long each pull request waits on the server.
	// Defaults to AckWait/3, between 1s and 30s. A pull that the client
	// still counts on after the server has let it go (nats.go's consume
	// loop sometimes does, seen under bursts of thousands of replies)
	// stalls the loop until it expires, so a consumer whose pauses cost
	// more than idle pulls sets it short.
	PullExpiry time.Duration
	// DeliverPolicy of a new durable; existing durables keep theirs.
	// Defaults to all messages still in the stream.
	DeliverPolicy jetstream.DeliverPolicy
	// CheckEvery is how often the durable's configuration on the server is
	// compared with the one set: a change by another client (an edited
	// filter stops the deliveries, and what is published meanwhile is
	// skipped for good) is logged as an error, counted (ConsumerDrifts),
	// told to OnDrift and put back if the user may. Defaults to 30s;
	// negative turns the check off.
	CheckEvery time.Duration
	// OnDrift is told of each change CheckEvery finds, and of a difference
	// found at start that could not be put back. nil: only the log and
	// the count.
	OnDrift func(ConsumerDrift)
}

func (c ConsumeConfig) withDefaults(prefetch int) ConsumeConfig {
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = 5
	}
	if len(c.BackOff) == 0 {
		c.BackOff = DefaultBackOff()
	}
	if c.MaxAckPending <= 0 {
		c.MaxAckPending = 1000
	}
	if c.PullMaxMessages <= 0 {
		c.PullMaxMessages = prefetch
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 1
	}
	if c.CheckEvery == 0 {
		c.CheckEvery = 30 * time.Second
	}
	return c
}

func (c ConsumeConfig) backoff(numDelivered uint64) time.Duration {
	return BackOffDelay(c.BackOff, numDelivered)
}

// DefaultBackOff is the default pause before a message handed back is
// delivered again, by its delivery count: 1 s, 5 s, 30 s, then 2 min.
// A fresh slice each time, which the caller may keep and change.
func DefaultBackOff() []time.Duration {
	return []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute}
}

// BackOffDelay is backoff's pause after the numDelivered'th delivery (from
// 1); its last entry holds for every later one.
func BackOffDelay(backoff []time.Duration, numDelivered uint64) time.Duration {
	i := max(0, min(int(numDelivered)-1, len(backoff)-1))
	return backoff[i]
}

// Delivery is one decoded message handed to a Handler.
type Delivery[T any] struct {
	Msg          T
	Subject      string
	Header       nats.Header
	ContentType  string
	Stream       string
	Consumer     string
	NumDelivered uint64 // 1 on first delivery
	StreamSeq    uint64
	Timestamp    time.Time // when the stream stored it

	raw     jetstream.Msg
	bus     *Bus
	backoff func(uint64) time.Duration
	sub     *Subscription
	mu      sync.Mutex
	done    bool
	held    bool
}

func (d *Delivery[T]) finish(f func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return errAlreadyFinished
	}
	if err := f(); err != nil {
		return err
	}
	d.done = true
	if d.held {
		d.sub.unhold(d.raw)
	}
	return nil
}

// Hold keeps the delivery unsettled past its handler's return, for
// whatever the handler handed it to (a person who decides) to settle
// later with Ack, NakWithDelay or Term. Until then the subscription renews
// its ack deadline every AckWait/3, so that it is not delivered again
// while it waits; when the subscription stops, a delivery still held is
// nak'd, so that it comes back at once to whoever consumes next rather
// than after AckWait. It fails once the delivery is settled or the
// subscription has stopped (the handler then returns an error, and the
// message is redelivered).
func (d *Delivery[T]) Hold() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return errAlreadyFinished
	}
	if d.sub == nil || !d.sub.hold(d.raw, d) {
		return errors.New("hold a delivery: the subscription has stopped")
	}
	d.held = true
	return nil
}

func (d *Delivery[T]) isHeld() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held && !d.done
}

// handBack nak's a held delivery at once (its subscription stops).
func (d *Delivery[T]) handBack() error { return d.finish(d.raw.Nak) }

var errAlreadyFinished = errors.New("delivery already acked, nak'd or termed")

// Ack acknowledges the message.
func (d *Delivery[T]) Ack() error { return d.finish(d.raw.Ack) }

// AckSync acknowledges the message and waits for the server to confirm.
func (d *Delivery[T]) AckSync(ctx context.Context) error {
	return d.finish(func() error { return d.raw.DoubleAck(ctx) })
}

// NakWithDelay asks for redelivery after delay.
func (d *Delivery[T]) NakWithDelay(delay time.Duration) error {
	return d.finish(func() error { return d.raw.NakWithDelay(delay) })
}

// InProgress resets the ack timer; call it every AckWait/3 during long work.
func (d *Delivery[T]) InProgress() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done {
		return errAlreadyFinished
	}
	return d.raw.InProgress()
}

// Term copies the message to TOOLGATE_DLQ with reason and terminates it.
func (d *Delivery[T]) Term(ctx context.Context, reason string) error {
	return d.finish(func() error { return d.bus.deadLetterMsg(ctx, d.raw, DLQHandler, reason) })
}

// Done reports whether the delivery was acked, nak'd or termed.
func (d *Delivery[T]) Done() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.done
}

// Subscription is a running consumer; Stop or Drain it.
type Subscription struct {
	ccs    []jetstream.ConsumeContext
	cancel context.CancelFunc // cancels handler contexts

	mu       sync.Mutex
	stopped  bool
	inflight int
	idle     chan struct{} // closed when stopped and inflight is 0

	stopOnce sync.Once
	watchEnd chan struct{}

	// held are the deliveries that handlers held (Delivery.Hold), by
	// message, renewed every renewEvery until settled; heldDone ends the
	// renewing once the subscription has stopped and handed them back.
	held       map[jetstream.Msg]heldDelivery
	heldClosed bool
	renewEvery time.Duration
	heldDone   chan struct{}
}

// heldDelivery is a held Delivery of any type.
type heldDelivery interface {
	InProgress() error
	handBack() error
}

// hold registers a held delivery; false once the subscription has handed
// back what it held.
func (s *Subscription) hold(m jetstream.Msg, d heldDelivery) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.heldClosed {
		return false
	}
	if s.held == nil {
		s.held = map[jetstream.Msg]heldDelivery{}
		s.heldDone = make(chan struct{})
		go s.renewHeld(s.heldDone)
	}
	s.held[m] = d
	return true
}

func (s *Subscription) unhold(m jetstream.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, m)
}

func (s *Subscription) heldNow() []heldDelivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]heldDelivery, 0, len(s.held))
	for _, d := range s.held {
		out = append(out, d)
	}
	return out
}

// renewHeld renews the held deliveries' ack deadlines until done.
func (s *Subscription) renewHeld(done <-chan struct{}) {
	tickUntil(done, max(s.renewEvery, 100*time.Millisecond), func() bool {
		for _, d := range s.heldNow() {
			// A delivery settled meanwhile answers errAlreadyFinished; a
			// failed renewal is tried again next tick, and at worst the
			// message is delivered again, which a holder must expect
			// anyway.
			_ = d.InProgress()
		}
		return true
	})
}

// tickUntil calls f every interval until done is closed or f returns
// false.
func tickUntil(done <-chan struct{}, every time.Duration, f func() bool) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if !f() {
				return
			}
		}
	}
}

// handBackHeld nak's what is still held, once the handlers are done: a
// held message comes back at once to the next consumer.
func (s *Subscription) handBackHeld() {
	s.mu.Lock()
	if s.heldClosed {
		s.mu.Unlock()
		return
	}
	s.heldClosed = true
	if s.heldDone != nil {
		close(s.heldDone)
	}
	s.mu.Unlock()
	for _, d := range s.heldNow() {
		_ = d.handBack()
	}
}

func (s *Subscription) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return false
	}
	s.inflight++
	return true
}

func (s *Subscription) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if s.stopped && s.inflight == 0 {
		s.closeIdle()
	}
}

func (s *Subscription) markStopped() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stopped {
		s.stopped = true
		if s.inflight == 0 {
			s.closeIdle()
		}
	}
}

func (s *Subscription) closeIdle() {
	select {
	case <-s.idle:
	default:
		close(s.idle)
	}
}

// Stop stops fetching and waits for running handlers. If ctx ends first,
// the handlers' context is cancelled and ctx's error returned.
func (s *Subscription) Stop(ctx context.Context) error {
	s.markStopped()
	s.endPulls()
	return s.wait(ctx)
}

// endPulls ends the consume loops' pulls. The loops are drained, not
// stopped: a stopped loop's client drops what reaches it afterwards, and a
// message a handler of this subscription has just handed back can reach
// it, since the server may send the redelivery to one of its pulls still
// waiting; dropped, it stayed unacked until AckWait. Drained, it reaches
// onMsg, which hands it back again until the server knows the pulls gone.
func (s *Subscription) endPulls() {
	for _, cc := range s.consumeContexts() {
		cc.Drain()
	}
}

// consumeContexts are the running consume loops; recreate replaces them.
func (s *Subscription) consumeContexts() []jetstream.ConsumeContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ccs)
}

// Drain stops fetching, lets messages already fetched be handled, and
// waits for the handlers (bounded by ctx, as Stop).
func (s *Subscription) Drain(ctx context.Context) error {
	ccs := s.consumeContexts()
	for _, cc := range ccs {
		cc.Drain()
	}
	for _, cc := range ccs {
		select {
		case <-cc.Closed():
		case <-ctx.Done():
		}
	}
	s.markStopped()
	s.endPulls() // loops a recreate started meanwhile
	return s.wait(ctx)
}

func (s *Subscription) wait(ctx context.Context) error {
	defer s.stopOnce.Do(func() { close(s.watchEnd) })
	defer s.handBackHeld()
	select {
	case <-s.idle:
	case <-ctx.Done():
		s.cancel()
		return fmt.Errorf("stop consumer: %w", ctx.Err())
	}
	for _, cc := range s.consumeContexts() {
		select {
		case <-cc.Closed():
		case <-ctx.Done():
			s.cancel()
			return fmt.Errorf("stop consumer: %w", ctx.Err())
		}
	}
	s.cancel()
	return nil
}

// decodeFunc decodes a raw message; a *DecodeError or *ValidationError
// (or any error) makes it a dead letter.
type decodeFunc[T any] func(m jetstream.Msg, contentType string) (T, error)

// consumerConfig is cc with the settings of cfg (already defaulted) that
// the server keeps on the durable.
func consumerConfig(cc jetstream.ConsumerConfig, cfg ConsumeConfig) jetstream.ConsumerConfig {
	cc.AckPolicy = jetstream.AckExplicitPolicy
	cc.AckWait = cfg.AckWait
	cc.MaxDeliver = cfg.MaxDeliver
	cc.MaxAckPending = cfg.MaxAckPending
	cc.DeliverPolicy = cfg.DeliverPolicy
	return cc
}

func consume[T any](ctx context.Context, b *Bus, stream string, cc jetstream.ConsumerConfig, cfg ConsumeConfig, decode decodeFunc[T], h Handler[T]) (*Subscription, error) {
	if h == nil {
		return nil, errors.New("handler is nil")
	}
	cc = consumerConfig(cc, cfg)
	logger := b.logger.With(slog.String("stream", stream), slog.String("consumer", cc.Durable))
	// Looked up before it is written: a user that may not update it (a
	// worker, call_<tool>) binds to it as it is.
	cons, have, err := b.bindConsumer(ctx, stream, cc, logger, cfg.OnDrift)
	if err != nil {
		return nil, err
	}
	told := strings.Join(configDrift(cc, have), "; ")
	if have.AckWait > 0 && have.AckWait < cfg.AckWait {
		// In-progress acks and held renewals must come within the
		// consumer's AckWait, not the one this process wanted.
		logger.Warn("the consumer's ack wait is shorter than this process's; renewing within it", slog.Duration("ack_wait", have.AckWait), slog.Duration("wanted", cfg.AckWait))
		cfg.AckWait = have.AckWait
	}
	hctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Subscription{cancel: cancel, idle: make(chan struct{}), watchEnd: make(chan struct{}), renewEvery: cfg.AckWait / 3}
	onMsg, loops := s.onMsg(cfg, func(m jetstream.Msg) { handleOne(hctx, b, s, logger, cfg, m, decode, h) })
	// lost hears of a consume loop whose consumer may be gone: deleted on
	// the server (by an operator, or a client with the right to), or
	// missing behind pulls that get no heartbeats.
	lost := make(chan lostConsumer, 2*loops)
	opts := []jetstream.PullConsumeOpt{
		jetstream.PullMaxMessages(cfg.PullMaxMessages),
		pullExpiry(cfg),
		consumeErrors(b, logger, lost),
	}
	start := func(cons jetstream.Consumer) ([]jetstream.ConsumeContext, error) {
		var ccs []jetstream.ConsumeContext
		for range loops {
			c, err := cons.Consume(onMsg, opts...)
			if err != nil {
				for _, c := range ccs {
					c.Stop()
				}
				return nil, fmt.Errorf("consume %s: %w", cc.Durable, err)
			}
			ccs = append(ccs, c)
		}
		return ccs, nil
	}
	if s.ccs, err = start(cons); err != nil {
		s.markStopped()
		cancel()
		return nil, err
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				// Fetching ends before the handlers are cancelled: what
				// they hand back then goes to another consumer.
				s.markStopped()
				s.endPulls()
				cancel()
				_ = s.wait(context.Background())
				return
			case <-s.watchEnd:
				return
			case l := <-lost:
				s.recreate(ctx, b, stream, cc, logger, l, start)
			}
		}
	}()
	go s.watchConfig(ctx, b, stream, cc, cfg, logger, told, cons.CachedInfo().Delivered.Stream, onMsg)
	return s, nil
}

// onMsg is the consume loops' callback, which runs handle for a message
// unless s has stopped (then it is handed back at once rather than after
// AckWait), and the number of loops to run. With Dispatch, each message
// waits for a handler in a goroutine of its own: the loop never waits,
// since a consume callback that blocks stops the client from seeing the
// pull's heartbeats, and the pull is then dropped as dead and pulled again
// only after a timeout; MaxAckPending bounds how many are delivered and
// unacked.
func (s *Subscription) onMsg(cfg ConsumeConfig, handle func(jetstream.Msg)) (func(jetstream.Msg), int) {
	if !cfg.Dispatch {
		return func(m jetstream.Msg) {
			if !s.enter() {
				_ = m.Nak()
				return
			}
			defer s.leave()
			handle(m)
		}, cfg.Concurrency
	}
	slots := cfg.Slots
	if slots == nil {
		slots = make(chan struct{}, cfg.Concurrency)
	}
	return func(m jetstream.Msg) {
		if !s.enter() {
			_ = m.Nak()
			return
		}
		go func() {
			slots <- struct{}{}
			defer func() {
				<-slots
				s.leave()
			}()
			handle(m)
		}()
	}, dispatchLoops
}

// consumeErrors logs the consume loops' errors; a consumer that may be
// gone is told on lost.
func consumeErrors(b *Bus, logger *slog.Logger, lost chan<- lostConsumer) jetstream.PullConsumeOpt {
	return jetstream.ConsumeErrHandler(func(c jetstream.ConsumeContext, err error) {
		// Missed heartbeats and leader changes are not fatal: the
		// consume loop pulls again by itself.
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			b.stalls.Add(1)
		}
		if b.pullFailed() {
			logger.Warn("consumers cannot pull; they pull again by themselves, and a line says when the server answers again (the pull errors until then are logged at debug level)", slog.Any("error", err))
		} else {
			logger.Debug("consume error", slog.Any("error", err))
		}
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrNoHeartbeat) {
			select {
			case lost <- lostConsumer{cc: c, err: err}:
			default:
			}
		}
	})
}

// pullExpiry makes pull requests expire well within AckWait: the waiting
// requests of a client that stalls (a frozen process, a long GC pause) are
// gone by the time its message is redelivered, so the redelivery goes to a
// live consumer instead of burning MaxDeliver on the stalled one.
func pullExpiry(cfg ConsumeConfig) jetstream.PullConsumeOpt {
	exp := min(max(cfg.AckWait/3, time.Second), jetstream.DefaultExpires)
	if cfg.PullExpiry > 0 {
		exp = cfg.PullExpiry
	}
	return jetstream.PullExpiry(exp)
}

type lostConsumer struct {
	cc  jetstream.ConsumeContext
	err error
}

// recreate makes a durable consumer again when it was deleted under its
// subscription (nats.go then stops consuming), so that a consumer removed
// by mistake or by another client does not silently end the work. What it
// had acked is lost with it, so its DeliverPolicy applies again and
// handlers may see such messages a second time (toolgate's handlers take a
// repeat as a duplicate). Only a loop of this subscription as it is now
// counts (the others have been replaced), and after missed heartbeats
// only if the consumer is indeed gone.
func (s *Subscription) recreate(ctx context.Context, b *Bus, stream string, cc jetstream.ConsumerConfig, logger *slog.Logger, l lostConsumer, start func(jetstream.Consumer) ([]jetstream.ConsumeContext, error)) {
	old := s.consumeContexts()
	if !slices.Contains(old, l.cc) {
		return
	}
	if !errors.Is(l.err, jetstream.ErrConsumerDeleted) {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := b.js.Consumer(ictx, stream, cc.Durable)
		cancel()
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return
		}
	}
	for _, c := range old {
		c.Stop()
	}
	for attempt := 0; ; attempt++ {
		// A user that may not make it (a worker) waits for whoever may.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cons, _, err := b.bindConsumer(cctx, stream, cc, logger, nil)
		cancel()
		var ccs []jetstream.ConsumeContext
		if err == nil {
			ccs, err = start(cons)
		}
		if err == nil {
			s.mu.Lock()
			stopped := s.stopped
			if !stopped {
				s.ccs = ccs
			}
			s.mu.Unlock()
			if stopped {
				for _, c := range ccs {
					c.Stop()
				}
				return
			}
			logger.Warn("the consumer was deleted; made it again", slog.Any("cause", l.err))
			return
		}
		logger.Error("the consumer was deleted; making it again failed", slog.Any("error", err), slog.Int("attempt", attempt))
		select {
		case <-ctx.Done():
			return
		case <-s.watchEnd:
			return
		case <-time.After(min(time.Second<<min(attempt, 5), 30*time.Second)):
		}
	}
}

// dispatchLoops is the number of consume loops of a Dispatch consumer:
// more than one, so that a pull the client gives up on (missed heartbeats
// under load; it pulls again only after the heartbeat timeout) stalls a
// part of the deliveries, not all of them.
const dispatchLoops = 4

func handleOne[T any](ctx context.Context, b *Bus, s *Subscription, logger *slog.Logger, cfg ConsumeConfig, m jetstream.Msg, decode decodeFunc[T], h Handler[T]) {
	meta, err := m.Metadata()
	if err != nil {
		logger.Error("message without metadata", slog.Any("error", err))
		_ = m.Term()
		return
	}
	logger = logger.With(slog.Uint64("stream_seq", meta.Sequence.Stream), slog.Uint64("delivered", meta.NumDelivered))
	ct := m.Headers().Get(wire.HeaderContentType)
	v, err := decode(m, ct)
	if err != nil {
		kind := DLQInvalid
		var de *wire.DecodeError
		if errors.As(err, &de) {
			kind = DLQDecode
		}
		logger.Warn("dead-lettering a message that cannot be handled", slog.String("subject", m.Subject()), slog.Any("error", err))
		if err := b.deadLetterMsg(ctx, m, kind, err.Error()); err != nil {
			logger.Error("dead letter", slog.Any("error", err))
			_ = m.NakWithDelay(cfg.backoff(meta.NumDelivered))
		}
		return
	}
	d := &Delivery[T]{
		Msg:          v,
		Subject:      m.Subject(),
		Header:       m.Headers(),
		ContentType:  ct,
		Stream:       meta.Stream,
		Consumer:     meta.Consumer,
		NumDelivered: meta.NumDelivered,
		StreamSeq:    meta.Sequence.Stream,
		Timestamp:    meta.Timestamp,
		raw:          m,
		bus:          b,
		backoff:      cfg.backoff,
		sub:          s,
	}
	if d.ContentType == "" {
		d.ContentType = wire.ContentTypeMsgpack
	}
	var stopProgress func()
	if cfg.AutoInProgress {
		stopProgress = progress(d, cfg.AckWait/3)
	}
	herr := callHandler(ctx, h, d)
	if stopProgress != nil {
		stopProgress()
	}
	var term *TermError
	switch {
	case herr == nil && d.isHeld():
		// Settled later by whoever holds it.
	case herr == nil:
		if err := d.Ack(); err != nil && !errors.Is(err, errAlreadyFinished) {
			logger.Warn("ack", slog.Any("error", err))
		}
	case errors.As(herr, &term):
		if err := d.Term(ctx, herr.Error()); err != nil && !errors.Is(err, errAlreadyFinished) {
			logger.Error("dead letter", slog.Any("error", err))
			_ = d.NakWithDelay(cfg.backoff(meta.NumDelivered))
		}
	default:
		logger.Warn("handler error, redelivering later", slog.Any("error", herr))
		if err := d.NakWithDelay(cfg.backoff(meta.NumDelivered)); err != nil && !errors.Is(err, errAlreadyFinished) {
			logger.Warn("nak", slog.Any("error", err))
		}
	}
}

// PanicError is a recovered handler panic.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panic: %v", e.Value) }

func callHandler[T any](ctx context.Context, h Handler[T], d *Delivery[T]) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h.Handle(ctx, d)
}

func progress[T any](d *Delivery[T], every time.Duration) (stop func()) {
	if every <= 0 {
		every = time.Second
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var stopped atomic.Bool
	wg.Go(func() { tickUntil(done, every, func() bool { return d.InProgress() == nil }) })
	return func() {
		if stopped.CompareAndSwap(false, true) {
			close(done)
			wg.Wait()
		}
	}
}

// ConsumeCalls runs handler for the calls of one tool on the durable
// call_<tool> shared by every worker of that tool, one message per loop
// (PullMaxMessages 1).
func (b *Bus) ConsumeCalls(ctx context.Context, tool string, cfg ConsumeConfig, h Handler[wire.CallRequest]) (*Subscription, error) {
	name, err := wire.CallConsumerName(tool)
	if err != nil {
		return nil, fmt.Errorf("consume calls: %w", err)
	}
	cfg = cfg.withDefaults(1)
	cfg.PullMaxMessages = 1
	cc := callConsumerBase(name, tool)
	s, err := consume(ctx, b, wire.StreamCalls, cc, cfg, func(m jetstream.Msg, ct string) (wire.CallRequest, error) {
		var r wire.CallRequest
		if err := wire.Decode(m.Data(), ct, &r); err != nil {
			return r, err
		}
		if r.ToolName != tool {
			return r, &wire.ValidationError{Message: "call request", Field: "tool_name", Reason: fmt.Sprintf("%q does not match subject %s", r.ToolName, m.Subject())}
		}
		return r, nil
	}, h)
	if err != nil {
		return nil, fmt.Errorf("consume calls of %s: %w", tool, err)
	}
	return s, nil
}

func callConsumerBase(name, tool string) jetstream.ConsumerConfig {
	subj, _ := wire.CallSubject(tool)
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   "calls of tool " + tool,
		FilterSubject: subj,
	}
}

// CallConsumerConfig is the configuration of the durable call_<tool> with
// the default ConsumeConfig: explicit acks, AckWait 30s, MaxDeliver 5,
// MaxAckPending 1000, every call still in the stream, filtered on
// toolgate.call.<tool>. MaxDeliver carries a guarantee: the fifth delivery
// without an ack raises the MAX_DELIVERIES advisory that fails the call
// "exhausted 5 deliveries" (HandleMaxDeliveries).
func CallConsumerConfig(tool string) (jetstream.ConsumerConfig, error) {
	name, err := wire.CallConsumerName(tool)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	return consumerConfig(callConsumerBase(name, tool), ConsumeConfig{}.withDefaults(1)), nil
}

// EnsureCallConsumer creates the durable call_<tool> with
// CallConsumerConfig unless it exists (a tool-worker's own settings, such
// as its --ack-wait, are left as they are). The orchestrator's call
// publications do this before a tool's first call, so that a worker
// written in another language only binds to the consumer and the call's
// guarantees do not depend on who created it. It is done once per tool
// and connection.
func (b *Bus) EnsureCallConsumer(ctx context.Context, tool string) error {
	if _, ok := b.callConsumers.Load(tool); ok {
		return nil
	}
	cc, err := CallConsumerConfig(tool)
	if err != nil {
		return fmt.Errorf("call consumer: %w", err)
	}
	gctx, release := b.deny.guard(ctx, jsAPIFor(wire.StreamCalls))
	_, err = b.js.CreateConsumer(gctx, wire.StreamCalls, cc)
	derr := denied(gctx)
	release()
	if derr != nil {
		return fmt.Errorf("call consumer %s: %w", cc.Durable, derr)
	}
	if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return fmt.Errorf("call consumer %s: %w", cc.Durable, errNotSetUp(err))
	}
	b.callConsumers.Store(tool, struct{}{})
	return nil
}

// ConsumeApprovals runs handler for approval requests on the approver's own
// durable, so every approver sees every request. filter defaults to
// AllApprovals (toolgate.approval.>); ApprovalSubject(tool) narrows it.
func (b *Bus) ConsumeApprovals(ctx context.Context, durable, filter string, cfg ConsumeConfig, h Handler[wire.ApprovalRequest]) (*Subscription, error) {
	if err := wire.ValidateToken("durable name", durable); err != nil {
		return nil, fmt.Errorf("consume approvals: %w", err)
	}
	if filter == "" {
		filter = wire.AllApprovals
	}
	cfg = cfg.withDefaults(16)
	cc := jetstream.ConsumerConfig{
		Durable:       durable,
		Description:   "approver " + durable,
		FilterSubject: filter,
	}
	s, err := consume(ctx, b, wire.StreamApprovals, cc, cfg, func(m jetstream.Msg, ct string) (wire.ApprovalRequest, error) {
		var r wire.ApprovalRequest
		if err := wire.Decode(m.Data(), ct, &r); err != nil {
			return r, err
		}
		if want, _ := wire.ApprovalSubject(r.ToolName); want != m.Subject() {
			return r, &wire.ValidationError{Message: "approval request", Field: "tool_name", Reason: fmt.Sprintf("%q does not match subject %s", r.ToolName, m.Subject())}
		}
		return r, r.Validate()
	}, h)
	if err != nil {
		return nil, fmt.Errorf("consume approvals for %s: %w", durable, err)
	}
	return s, nil
}

// Reply is a result or a decision, as the subject's kind says: Call is set
// for ReplyKindCall, Decision for ReplyKindApproval. A body that does not
// match its subject (a decision on a .call subject, another run's id) is a
// dead letter, so a worker cannot pass a decision off as a result.
type Reply struct {
	Kind     string
	RunID    string
	Call     *wire.CallReply
	Decision *wire.Decision
}

// ToolCallID of the reply.
func (r Reply) ToolCallID() string {
	if r.Call != nil {
		return r.Call.ToolCallID
	}
	if r.Decision != nil {
		return r.Decision.ToolCallID
	}
	return ""
}

// ConsumeReplies runs handler for every result and decision on durable,
// stored as published or in a partition (partition.go).
func (b *Bus) ConsumeReplies(ctx context.Context, durable string, cfg ConsumeConfig, h Handler[Reply]) (*Subscription, error) {
	return b.consumeReplies(ctx, durable, "replies", []string{wire.AllReplies, PrefixReplyPartitioned + ".>"}, cfg, h)
}

// ConsumeUnpartitionedReplies runs handler for the results and decisions
// stored as published, on a durable shared by every orchestrator replica:
// all of them on a stream without partitions, and otherwise those stored
// before the stream had them. Its filter is the one of earlier builds, so
// that their replicas, bound to the same durable during an upgrade, and
// this one's never undo each other's.
func (b *Bus) ConsumeUnpartitionedReplies(ctx context.Context, durable string, cfg ConsumeConfig, h Handler[Reply]) (*Subscription, error) {
	return b.consumeReplies(ctx, durable, "orchestrator replies", []string{wire.AllReplies}, cfg, h)
}

func (b *Bus) consumeReplies(ctx context.Context, durable, desc string, filters []string, cfg ConsumeConfig, h Handler[Reply]) (*Subscription, error) {
	if err := wire.ValidateToken("durable name", durable); err != nil {
		return nil, fmt.Errorf("consume replies: %w", err)
	}
	cfg = cfg.withDefaults(64)
	cc := jetstream.ConsumerConfig{Durable: durable, Description: desc}
	if len(filters) == 1 {
		cc.FilterSubject = filters[0]
	} else {
		cc.FilterSubjects = filters
	}
	s, err := consume(ctx, b, wire.StreamReplies, cc, cfg, decodeReply, h)
	if err != nil {
		return nil, fmt.Errorf("consume replies %s: %w", durable, err)
	}
	return s, nil
}

func decodeReply(m jetstream.Msg, ct string) (Reply, error) {
	run, kind, err := wire.ParseReplySubject(WireReplySubject(m.Subject()))
	if err != nil {
		return Reply{}, &wire.ValidationError{Message: "reply", Field: "subject", Reason: err.Error()}
	}
	r := Reply{Kind: kind, RunID: run}
	var bodyRun string
	switch kind {
	case wire.ReplyKindCall:
		r.Call = new(wire.CallReply)
		if err := wire.Decode(m.Data(), ct, r.Call); err != nil {
			return r, err
		}
		bodyRun = r.Call.RunID
	default:
		r.Decision = new(wire.Decision)
		if err := wire.Decode(m.Data(), ct, r.Decision); err != nil {
			return r, err
		}
		bodyRun = r.Decision.RunID
	}
	if bodyRun != run {
		return r, &wire.ValidationError{Message: "reply", Field: "run_id", Reason: fmt.Sprintf("%q does not match subject %s", bodyRun, m.Subject())}
	}
	return r, nil
}

// CallTakers reports, from the info of the durable call_<tool>, the pull
// requests waiting on it and the calls it delivered that are not acked
// yet. A worker that serves the tool keeps pull requests waiting while it
// has room and holds unacked calls while it works, so a consumer with
// neither has nobody taking its calls now. A consumer that does not exist
// has neither.
func (b *Bus) CallTakers(ctx context.Context, tool string) (waiting, unacked int, err error) {
	name, err := wire.CallConsumerName(tool)
	if err != nil {
		return 0, 0, fmt.Errorf("call takers: %w", err)
	}
	gctx, release := b.deny.guard(ctx, jsAPIFor(wire.StreamCalls))
	c, err := b.js.Consumer(gctx, wire.StreamCalls, name)
	derr := denied(gctx)
	release()
	if derr != nil {
		return 0, 0, fmt.Errorf("call consumer %s: %w", name, derr)
	}
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("call consumer %s: %w", name, err)
	}
	info := c.CachedInfo()
	return info.NumWaiting, info.NumAckPending, nil
}
