package orchestrator

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/wire"
)

// Event types the orchestrator adds to the agent's own (agent.EventKind);
// package wire defines them with their payloads.
const (
	EventRunStarted     = wire.EventRunStarted
	EventRunPaused      = wire.EventRunPaused
	EventRunCompleted   = wire.EventRunCompleted
	EventRunFailed      = wire.EventRunFailed
	EventReplyApplied   = wire.EventReplyApplied
	EventCallDispatched = wire.EventCallDispatched
	EventReplyRefused   = wire.EventReplyRefused
	EventCallsExpired   = wire.EventCallsExpired

	EventConversationCancelled = wire.EventConversationCancelled
	EventAgentUnavailable      = wire.EventAgentUnavailable
	EventToolUnserved          = wire.EventToolUnserved
	EventApprovalEscalated     = wire.EventApprovalEscalated
)

// Events are for UIs, so they leave the hot path: they are queued in order
// and one goroutine publishes what has gathered with asynchronous publishes,
// waiting for the acks of a batch before the next, so a conversation's
// events keep their order. A full queue makes emitters wait: a slow stream
// slows runs down rather than growing memory.
//
// The loop lets a conversation's events gather, so that what one step of
// it emits (a run's start, its model response, its calls and its pause; a
// reply applied and the follow-up it starts) goes out as one message
// instead of one per moment the loop happened to wake, each of which
// JetStream stores and acks. While a run of the conversation is under way
// in this process (from the effector's launch to the run's end: runBegan,
// runEnded), its events wait for the run's end,
// for at most eventHoldMax; otherwise for eventLinger after the first. A
// fixed linger alone split a step whenever the run waited for a slot or
// the machine was busy: a batch-1 call stored 2.8 event messages, with
// the hold 2. A run that pauses on calls only machines answer (external
// calls, no approval) does not release its events: they wait on, to at
// most eventHoldMax after the step's first, for the follow-up that a quick
// worker's reply starts, and the two steps go as one message (awaitReplies).
// A pause that waits for a person (an approval) releases at once, so that
// an inbox or a UI shows the request without delay. A UI sees an event at
// most eventHoldMax later, well under what a person notices; streamed text
// deltas flow at that pace.
const (
	eventQueueMax = 8192
	eventBatchMax = 4096
	eventLinger   = 20 * time.Millisecond
	eventHoldMax  = 250 * time.Millisecond
	// eventHoldCount is how many events of a conversation make it ready
	// however young: a fast conversation's steps go a few at a time
	// rather than all of a quarter second at once (which came as a burst
	// of work on the calls that followed, and held their memory), while a
	// batch-1 call's two steps, about eight events, still go as one.
	eventHoldCount = 64
)

// queuedEvent is an event waiting to be published. A text delta keeps its
// text apart so that deltas of a run queued back to back are sent as one.
type queuedEvent struct {
	ev    wire.Event
	delta *agentEventData
	// data holds ev.Data (bus.EncodePooled), given back once the event
	// is published.
	data *[]byte
}

// releaseData gives back the data of events that will not be published
// or have been.
func releaseData(events []queuedEvent) {
	for _, q := range events {
		bus.ReleaseEncoded(q.data)
	}
}

type eventQueue struct {
	mu   sync.Mutex
	cond *sync.Cond // signalled when the publisher took events
	// convs are the queued events of each conversation, in their order:
	// taken a conversation at a time, they go to the publisher as the
	// slice they were queued in, and what is ready is judged by each
	// conversation's oldest without going over the events (a scan of one
	// global queue at every push made a long conversation's calls slower
	// as the queue grew; its copies at every take were a fifth of a
	// resumed conversation's garbage).
	convs map[string]*convEvents
	// n counts the events queued, of all conversations.
	n int
	// takenAll and doneAll count the events ever taken and ever
	// published: their difference is what is being published now.
	takenAll, doneAll uint64
	// held counts the runs under way in this process, by conversation;
	// released are the conversations whose last run ended since; awaiting
	// those whose last run paused on calls that machines answer, whose
	// events wait for the follow-up's end (awaitReplies).
	held     map[string]int
	released map[string]bool
	awaiting map[string]bool
	// deferred are the events of runs launched before what they start
	// from is stored (tentative.go), by conversation and run: they wait
	// apart until it is (settleRun) and are forgotten if it cannot be
	// (dropRun). Keyed by run, not by conversation: what other paths emit
	// of the conversation meanwhile (a cancel, a reply's refusal, an
	// expiry) is not the run's to keep or to lose.
	deferred map[runKey]*deferredEvents
	// readyNow is ready's answer, reused from one take to the next.
	readyNow map[string]bool
	closed   bool
	wake     chan struct{}
	stopped  chan struct{}
}

// convEvents is what is queued of one conversation.
type convEvents struct {
	events []queuedEvent
	// oldest is when the oldest of events was queued.
	oldest time.Time
}

// convEventsCap is the room a conversation's queue starts with: the events
// of a step of a batch-1 call.
const convEventsCap = 8

// The arrays of a conversation's queued events, and of the events they
// become, are used again once published: each step of every conversation
// needs them, and they were a tenth of a resumed conversation's garbage.
var (
	queuedArrays = arrayPool[queuedEvent]{pool: sync.Pool{New: func() any { return new([]queuedEvent) }}}
	eventArrays  = arrayPool[wire.Event]{pool: sync.Pool{New: func() any { return new([]wire.Event) }}}
)

type arrayPool[T any] struct{ pool sync.Pool }

// get is an empty slice with room for at least n.
func (p *arrayPool[T]) get(n int) []T {
	s := *p.pool.Get().(*[]T)
	if cap(s) < n {
		return make([]T, 0, max(n, convEventsCap))
	}
	return s[:0]
}

// put takes s back; nothing may use it after. A large array is let go.
func (p *arrayPool[T]) put(s []T) {
	if cap(s) == 0 || cap(s) > 8*convEventsCap {
		return
	}
	clear(s[:cap(s)])
	s = s[:0]
	p.pool.Put(&s)
}

func newEventQueue() *eventQueue {
	e := &eventQueue{wake: make(chan struct{}, 1), stopped: make(chan struct{}), convs: map[string]*convEvents{},
		held: map[string]int{}, released: map[string]bool{}, awaiting: map[string]bool{}, readyNow: map[string]bool{},
		deferred: map[runKey]*deferredEvents{}}
	e.cond = sync.NewCond(&e.mu)
	return e
}

// push queues ev; it reports false once the queue is closed, and the caller
// publishes the event itself.
func (e *eventQueue) push(ev queuedEvent) bool {
	e.mu.Lock()
	if e.keepDeferred(ev) {
		e.mu.Unlock()
		return true
	}
	if !e.waitRoom() {
		e.mu.Unlock()
		return false
	}
	ce := e.conv(ev.ev.ConversationID)
	if n := len(ce.events); ev.delta != nil && n > 0 {
		if last := &ce.events[n-1]; last.delta != nil && last.ev.RunID == ev.ev.RunID {
			d := *last.delta
			d.Delta += ev.delta.Delta
			last.delta = &d
			e.mu.Unlock()
			return true
		}
	}
	ce.events = append(ce.events, ev)
	e.n++
	e.mu.Unlock()
	e.signal()
	return true
}

// pushAll queues the events of one conversation, in their order, taking
// evs over; it reports false once the queue is closed.
func (e *eventQueue) pushAll(evs []queuedEvent) bool {
	if len(evs) == 0 {
		return true
	}
	e.mu.Lock()
	if !e.waitRoom() {
		e.mu.Unlock()
		return false
	}
	if ce := e.convs[evs[0].ev.ConversationID]; ce != nil {
		ce.events = append(ce.events, evs...)
		queuedArrays.put(evs)
	} else {
		e.convs[evs[0].ev.ConversationID] = &convEvents{events: evs, oldest: time.Now()}
	}
	e.n += len(evs)
	e.mu.Unlock()
	e.signal()
	return true
}

// waitRoom waits, with e.mu held, while the queue is full; false: it is
// closed.
func (e *eventQueue) waitRoom() bool {
	for !e.closed && e.n >= eventQueueMax {
		e.cond.Wait()
	}
	return !e.closed
}

// conv is the queue of conversation id, made if it has none.
func (e *eventQueue) conv(id string) *convEvents {
	ce := e.convs[id]
	if ce == nil {
		ce = &convEvents{events: queuedArrays.get(convEventsCap), oldest: time.Now()}
		e.convs[id] = ce
	}
	return ce
}

// runKey names a run of a conversation.
type runKey struct{ conv, run string }

// deferredEvents are the events of a run that wait for what the run
// started from to be stored.
type deferredEvents struct {
	events []queuedEvent
	// dropped: what the run started from will not be stored; what it
	// emits until it ends is forgotten.
	dropped bool
}

// keepDeferred keeps ev apart, with e.mu held, if its run's events are
// deferred (or forgets it if the run was dropped); false: ev is queued.
func (e *eventQueue) keepDeferred(ev queuedEvent) bool {
	if len(e.deferred) == 0 {
		return false
	}
	d := e.deferred[runKey{ev.ev.ConversationID, ev.ev.RunID}]
	if d == nil {
		return false
	}
	if d.dropped {
		bus.ReleaseEncoded(ev.data)
		return true
	}
	if d.events == nil {
		d.events = queuedArrays.get(convEventsCap)
	}
	d.events = append(d.events, ev)
	return true
}

// deferRun keeps the events of run runID of conversation convID apart
// until settleRun or dropRun.
func (e *eventQueue) deferRun(convID, runID string) {
	e.mu.Lock()
	e.deferred[runKey{convID, runID}] = &deferredEvents{}
	e.mu.Unlock()
}

// settleRun queues what run runID of conversation convID emitted so far,
// in its order, behind what its conversation has queued; what it emits
// after is queued as any event. It returns the events to publish at once,
// the queue being closed.
func (e *eventQueue) settleRun(convID, runID string) []queuedEvent {
	k := runKey{convID, runID}
	e.mu.Lock()
	d := e.deferred[k]
	if d == nil || d.dropped {
		e.mu.Unlock()
		return nil
	}
	// While waiting for room, what the run emits still joins d.events.
	open := len(d.events) == 0 || e.waitRoom()
	delete(e.deferred, k)
	evs := d.events
	if len(evs) == 0 {
		e.mu.Unlock()
		return nil
	}
	if !open {
		e.mu.Unlock()
		return evs
	}
	if ce := e.convs[convID]; ce != nil {
		ce.events = append(ce.events, evs...)
		queuedArrays.put(evs)
	} else {
		e.convs[convID] = &convEvents{events: evs, oldest: time.Now()}
	}
	e.n += len(evs)
	e.mu.Unlock()
	e.signal()
	return nil
}

// dropRun forgets what run runID of conversation convID emitted, and what
// it emits until it ends (runEnded).
func (e *eventQueue) dropRun(convID, runID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d := e.deferred[runKey{convID, runID}]; d != nil {
		releaseData(d.events)
		queuedArrays.put(d.events)
		d.events, d.dropped = nil, true
	}
}

// runEnded forgets the run as dropped, once it has ended: its id may run
// again (a take-over). A run whose events still wait is left to its
// settleRun or dropRun.
func (e *eventQueue) runEnded(convID, runID string) {
	k := runKey{convID, runID}
	e.mu.Lock()
	if d := e.deferred[k]; d != nil && d.dropped {
		delete(e.deferred, k)
	}
	e.mu.Unlock()
}

// hold says a run of conversation id is under way here: its events wait
// for release (at most eventHoldMax).
func (e *eventQueue) hold(id string) {
	e.mu.Lock()
	e.held[id]++
	// The replies awaited came: this run's end sends what waited.
	delete(e.awaiting, id)
	e.mu.Unlock()
}

// release says a run of conversation id ended: once none is under way,
// what it emitted goes out at once, unless the run paused awaiting
// replies (awaitReplies).
func (e *eventQueue) release(id string) {
	e.mu.Lock()
	if e.held[id]--; e.held[id] <= 0 {
		delete(e.held, id)
		if !e.awaiting[id] {
			e.released[id] = true
		}
	}
	e.mu.Unlock()
	e.signal()
}

// awaitReplies says the run of conversation id under way paused on calls
// that machines answer: at its release its events keep waiting, as held
// ones do, until the next run of it ends or the first of them is
// eventHoldMax old, so that the follow-up a quick reply starts goes in
// the same message. Called before the run's release.
func (e *eventQueue) awaitReplies(id string) {
	e.mu.Lock()
	if e.held[id] > 0 {
		e.awaiting[id] = true
	}
	e.mu.Unlock()
}

func (e *eventQueue) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// take removes the queued events of the conversations that are ready (see
// eventHoldMax), up to eventBatchMax in all: the events of each in their
// order, a conversation's apart from another's. It waits until one is,
// and returns nothing once the queue is empty. A closed or half-full
// queue is ready at once.
func (e *eventQueue) take() [][]queuedEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		if e.n == 0 {
			return nil
		}
		ready, wait := e.ready(time.Now())
		if len(ready) > 0 {
			return e.takeOf(ready)
		}
		e.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-e.wake:
		case <-t.C:
		}
		t.Stop()
		e.mu.Lock()
	}
}

// ready are the conversations whose events may go now (judged by the
// oldest of each), and otherwise the time until the first may. The map
// is valid until the next call.
func (e *eventQueue) ready(now time.Time) (map[string]bool, time.Duration) {
	all := e.closed || e.n >= eventQueueMax/2
	ready := e.readyNow
	clear(ready)
	wait := eventHoldMax
	for id, ce := range e.convs {
		linger := eventLinger
		if e.held[id] > 0 || e.awaiting[id] {
			linger = eventHoldMax
		}
		if left := linger - now.Sub(ce.oldest); all || e.released[id] || left <= 0 || len(ce.events) >= eventHoldCount {
			ready[id] = true
		} else {
			wait = min(wait, left)
		}
	}
	for id := range e.released {
		if _, queued := e.convs[id]; !queued {
			delete(e.released, id)
		}
	}
	for id := range e.awaiting {
		if _, queued := e.convs[id]; !queued && e.held[id] == 0 {
			delete(e.awaiting, id)
		}
	}
	return ready, wait
}

// takeOf removes the queued events of the ready conversations, the oldest
// first, up to eventBatchMax in all: one that does not fit whole keeps
// the rest, as old as what was taken.
func (e *eventQueue) takeOf(ready map[string]bool) [][]queuedEvent {
	ids := make([]string, 0, len(ready))
	for id := range ready {
		ids = append(ids, id)
	}
	if e.n > eventBatchMax {
		slices.SortFunc(ids, func(a, b string) int { return e.convs[a].oldest.Compare(e.convs[b].oldest) })
	}
	out := make([][]queuedEvent, 0, len(ids))
	room := eventBatchMax
	for _, id := range ids {
		if room == 0 {
			break
		}
		ce := e.convs[id]
		if len(ce.events) > room {
			out = append(out, ce.events[:room:room])
			ce.events = ce.events[room:] // since ce.oldest: ready at once
			room = 0
			break
		}
		out = append(out, ce.events)
		room -= len(ce.events)
		delete(e.convs, id)
		delete(e.released, id)
		if e.held[id] == 0 {
			// Waited out: later events of it linger as usual.
			delete(e.awaiting, id)
		}
	}
	n := eventBatchMax - room
	e.n -= n
	e.takenAll += uint64(n)
	e.cond.Broadcast()
	return out
}

// done records that n taken events were published.
func (e *eventQueue) done(n int) {
	e.mu.Lock()
	e.doneAll += uint64(n)
	e.cond.Broadcast()
	e.mu.Unlock()
}

// forget drops the queued events of conversation id and waits until those
// being published are out, so that a purge of its events that follows
// leaves none behind.
func (e *eventQueue) forget(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if ce := e.convs[id]; ce != nil {
		e.n -= len(ce.events)
		delete(e.convs, id)
	}
	delete(e.awaiting, id)
	for target := e.takenAll; e.doneAll < target; {
		e.cond.Wait()
	}
	// Room was made: pushes waiting for it go on.
	e.cond.Broadcast()
}

// pending is the number of events queued or being published.
func (e *eventQueue) pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n + int(e.takenAll-e.doneAll)
}

func (e *eventQueue) close() {
	e.mu.Lock()
	e.closed = true
	e.cond.Broadcast()
	e.mu.Unlock()
}

// eventPublisher publishes the events of runs and replies on the event
// bus (Config.EventBus) through its queue; it needs nothing else of the
// orchestrator.
type eventPublisher struct {
	bus   *bus.Bus
	log   *slog.Logger
	clock func() time.Time
	queue *eventQueue
}

func newEventPublisher(b *bus.Bus, log *slog.Logger, clock func() time.Time) *eventPublisher {
	return &eventPublisher{bus: b, log: log, clock: clock, queue: newEventQueue()}
}

// purge removes the events of conversation id, those still queued first:
// published after the purge, they would outlive the conversation.
func (p *eventPublisher) purge(ctx context.Context, id string) error {
	subj, err := wire.EventSubject(id)
	if err != nil {
		return err
	}
	p.queue.forget(id)
	return p.bus.PurgeLog(ctx, wire.StreamEvents, subj, 0)
}

// loop publishes queued events until the queue is closed and empty.
func (p *eventPublisher) loop() {
	q := p.queue
	defer close(q.stopped)
	for {
		batch := q.take()
		if len(batch) > 0 {
			p.publishQueued(batch)
			n := 0
			for _, evs := range batch {
				n += len(evs)
			}
			q.done(n)
			continue
		}
		q.mu.Lock()
		done := q.closed && q.n == 0
		q.mu.Unlock()
		if done {
			return
		}
		<-q.wake
	}
}

// publishQueued publishes what the queue held: the events of each
// conversation as one message (wire.EventBatch), in their order, so that a
// busy run's events cost one stored message instead of one each.
func (p *eventPublisher) publishQueued(batch [][]queuedEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), replyTimeout)
	defer cancel()
	msgs := make([]bus.Outgoing, 0, len(batch))
	arrays := make([][]wire.Event, 0, len(batch))
	defer func() {
		for _, a := range arrays {
			eventArrays.put(a)
		}
		for _, q := range batch {
			releaseData(q)
			queuedArrays.put(q)
		}
	}()
	for _, queued := range batch {
		events := eventArrays.get(len(queued))
		for i := range queued {
			q := &queued[i]
			ev := q.ev
			if q.delta != nil {
				b, e, err := bus.EncodePooled(q.delta, wire.ContentTypeJSON)
				if err != nil {
					p.log.WarnContext(ctx, "encode event", slog.String("type", ev.Type), slog.String("error", err.Error()))
					continue
				}
				q.data, ev.Data = e, b
			}
			events = append(events, ev)
		}
		arrays = append(arrays, events)
		for _, chunk := range chunkEvents(events) {
			// Their data is json.Marshal's.
			m, err := bus.EncodedEventBatchMessage(chunk)
			if err == nil {
				msgs = append(msgs, m)
				continue
			}
			// An invalid event (the bus validates each one) costs only
			// itself: the others of its batch go one by one.
			for _, ev := range chunk {
				m, err := bus.EventMessage(ev, "")
				if err != nil {
					p.log.WarnContext(ctx, "encode event", slog.String("type", ev.Type), slog.String("error", err.Error()))
					continue
				}
				msgs = append(msgs, m)
			}
		}
	}
	if err := p.bus.PublishBatch(ctx, msgs); err != nil {
		p.log.WarnContext(ctx, "publish events", slog.Int("events", len(msgs)), slog.String("error", err.Error()))
	}
}

// eventBatchBytes bounds the data of one batch message, well within the
// server's max payload: a large event (a long tool result) goes alone.
const eventBatchBytes = 256 << 10

// eventOverhead is a generous estimate of an event's size beside its data.
const eventOverhead = 512

// chunkEvents splits events into batches of at most eventBatchBytes of
// estimated size, keeping their order; the batches share events' array.
func chunkEvents(events []wire.Event) [][]wire.Event {
	var (
		out   [][]wire.Event
		first int
		size  int
	)
	for i, e := range events {
		n := len(e.Data) + eventOverhead
		if i > first && (size+n > eventBatchBytes || i-first == wire.MaxEventBatch) {
			out = append(out, events[first:i:i])
			first, size = i, 0
		}
		size += n
	}
	if first < len(events) {
		out = append(out, events[first:])
	}
	return out
}

// stop publishes what is queued and ends the loop.
func (p *eventPublisher) stop(ctx context.Context) {
	p.queue.close()
	select {
	case p.queue.wake <- struct{}{}:
	default:
	}
	select {
	case <-p.queue.stopped:
	case <-ctx.Done():
	}
}

// publish publishes one event on toolgate.event.<conversation>. Events
// are for UIs: a failure is logged and the work goes on.
func (p *eventPublisher) publish(ctx context.Context, convID, runID, typ, callID string, data any) {
	var (
		raw json.RawMessage
		buf *[]byte
	)
	if data != nil {
		var err error
		if raw, buf, err = bus.EncodePooled(data, wire.ContentTypeJSON); err != nil {
			p.log.WarnContext(ctx, "encode event", slog.String("type", typ), slog.String("error", err.Error()))
			return
		}
	}
	p.enqueue(queuedEvent{ev: wire.Event{ConversationID: convID, RunID: runID, Type: typ, ToolCallID: callID, Data: raw, Time: p.clock().UTC()}, data: buf})
}

// The event sink's policy for runs, told by the effector as it launches
// them (effector.go): the runner and the reply path neither hold nor
// release anything.

// runBegan says run runID of conversation convID began here: what the
// conversation emits waits for the run's end (runEnded), for at most
// eventHoldMax. A deferred run's own events wait apart besides, for what
// it started from to be stored (settleRun) or not (dropRun).
func (p *eventPublisher) runBegan(convID, runID string, deferred bool) {
	if deferred {
		p.queue.deferRun(convID, runID)
	}
	p.queue.hold(convID)
}

// runEnded says run runID of conversation convID ended, whichever way.
func (p *eventPublisher) runEnded(convID, runID string) {
	p.queue.runEnded(convID, runID)
	p.queue.release(convID)
}

// settleRun sends what the deferred run emitted on, its start stored.
func (p *eventPublisher) settleRun(convID, runID string) {
	if evs := p.queue.settleRun(convID, runID); len(evs) > 0 {
		p.publishQueued([][]queuedEvent{evs})
	}
}

// dropRun forgets what the deferred run emitted and will, its start not
// stored.
func (p *eventPublisher) dropRun(convID, runID string) { p.queue.dropRun(convID, runID) }

// awaitReplies says the run of convID under way paused on calls that
// machines answer (eventQueue.awaitReplies).
func (p *eventPublisher) awaitReplies(convID string) { p.queue.awaitReplies(convID) }

// enqueue queues q, or publishes it at once if the loop has ended.
func (p *eventPublisher) enqueue(q queuedEvent) {
	if p.queue.push(q) {
		return
	}
	// The loop has ended (the orchestrator stopped): publish directly.
	p.publishQueued([][]queuedEvent{{q}})
}

// enqueueAll queues the events of one conversation (taking evs over), or
// publishes them at once if the loop has ended.
func (p *eventPublisher) enqueueAll(evs []queuedEvent) {
	if p.queue.pushAll(evs) {
		return
	}
	p.publishQueued([][]queuedEvent{evs})
}

// agentEventData is an agent event as its event's data: the agent.Event
// less what the event itself says (its run, conversation and time), which
// every event of a run would otherwise store twice; for a text delta, most
// of its bytes.
type agentEventData struct {
	Kind     agent.EventKind    `json:"kind"`
	Delta    string             `json:"delta,omitempty"`
	Part     *agent.Part        `json:"part,omitempty"`
	Message  *agent.Message     `json:"message,omitempty"`
	Requests *deferred.Requests `json:"requests,omitempty"`
	Results  *deferred.Results  `json:"results,omitempty"`
	Result   *agent.RunResult   `json:"result,omitempty"`
}

// agentEvent forwards an agent event; agentEventData is the data.
func (p *eventPublisher) agentEvent(ctx context.Context, convID, runID string, ev agent.Event) {
	d := agentEventData{Kind: ev.Kind, Delta: ev.Delta, Part: ev.Part, Message: ev.Message, Requests: ev.Requests, Results: ev.Results, Result: ev.Result}
	if ev.Kind == agent.EventTextDelta {
		p.enqueue(queuedEvent{
			ev:    wire.Event{ConversationID: convID, RunID: runID, Type: string(ev.Kind), Time: p.clock().UTC()},
			delta: &d,
		})
		return
	}
	callID := ""
	if ev.Part != nil {
		callID = ev.Part.ToolCallID
	}
	if ev.Kind == agent.EventRunDone && ev.Result != nil {
		// The history is in the log and in the other events; the event
		// stays small.
		r := *ev.Result
		r.NewMessages = nil
		d.Result = &r
	}
	p.publish(ctx, convID, runID, string(ev.Kind), callID, d)
}
