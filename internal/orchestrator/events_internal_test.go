package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
)

// Events are batched in order, within the size bound; a large event goes
// alone.
func TestChunkEvents(t *testing.T) {
	ev := func(typ string, data int) wire.Event {
		return wire.Event{ConversationID: "c", Type: typ, Data: json.RawMessage(`"` + strings.Repeat("x", data) + `"`)}
	}
	events := []wire.Event{ev("a", 10), ev("b", 10), ev("big", eventBatchBytes), ev("c", 100<<10), ev("d", 100<<10), ev("e", 100<<10)}
	var got [][]string
	for _, chunk := range chunkEvents(events) {
		var types []string
		for _, e := range chunk {
			types = append(types, e.Type)
		}
		got = append(got, types)
	}
	if g, want := fmt.Sprint(got), "[[a b] [big] [c d] [e]]"; g != want {
		t.Errorf("chunks %s, want %s", g, want)
	}

	many := make([]wire.Event, 3*wire.MaxEventBatch)
	for i := range many {
		many[i] = ev(fmt.Sprint(i), 0)
	}
	n := 0
	for _, chunk := range chunkEvents(many) {
		if len(chunk) > wire.MaxEventBatch {
			t.Errorf("a chunk of %d events", len(chunk))
		}
		for _, e := range chunk {
			if e.Type != fmt.Sprint(n) {
				t.Fatalf("event %s where %d belongs", e.Type, n)
			}
			n++
		}
	}
	if n != len(many) {
		t.Errorf("%d of %d events chunked", n, len(many))
	}
}

// An invalid event is dropped alone: the valid events queued with it are
// still published, in order.
func TestInvalidEventDroppedAlone(t *testing.T) {
	b := bustest.NewBus(t)
	p := newEventPublisher(b, slog.New(slog.DiscardHandler), time.Now)
	ev := func(typ string) queuedEvent {
		return queuedEvent{ev: wire.Event{ConversationID: "c1", Type: typ, Time: time.Now()}}
	}
	p.publishQueued([][]queuedEvent{{ev("first"), ev(""), ev("third")}})
	var got []string
	for se, err := range b.Events(t.Context(), "c1", 0) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, se.Event.Type)
		if len(got) == 2 {
			break
		}
	}
	if fmt.Sprint(got) != "[first third]" {
		t.Errorf("published %v, want [first third]", got)
	}
}

// taken is what q.take takes, one conversation's events after another's.
func taken(q *eventQueue) []queuedEvent {
	var out []queuedEvent
	for _, evs := range q.take() {
		out = append(out, evs...)
	}
	return out
}

// Events queued close together are taken together, the oldest having
// waited eventLinger: what one step of a conversation emits goes out as one
// message.
func TestEventQueueGathersAStep(t *testing.T) {
	q := newEventQueue()
	first := time.Now()
	for _, typ := range []string{"run_started", "model_response", "run_paused"} {
		if !q.push(queuedEvent{ev: wire.Event{ConversationID: "c1", Type: typ, Time: time.Now()}}) {
			t.Fatal("push refused")
		}
	}
	got := taken(q)
	if waited := time.Since(first); waited < eventLinger {
		t.Errorf("taken after %s, before the linger of %s", waited, eventLinger)
	}
	if len(got) != 3 {
		t.Fatalf("took %d events, want the 3 of the step", len(got))
	}
	// Closed, what is left goes at once.
	q.push(queuedEvent{ev: wire.Event{ConversationID: "c1", Type: "run_completed", Time: time.Now()}})
	q.close()
	if got := taken(q); len(got) != 1 {
		t.Errorf("took %d events of a closed queue, want 1", len(got))
	}
}

// While a run of a conversation is under way here, its events wait for
// the run's end, however long past eventLinger (at most eventHoldMax), and
// then go at once, the whole step in one batch; a conversation with no run
// here is ready after eventLinger meanwhile. Judged at given times, so
// that nothing waits on the clock.
func TestEventQueueHoldsARunsEvents(t *testing.T) {
	q := newEventQueue()
	push := func(conv, typ string) {
		q.push(queuedEvent{ev: wire.Event{ConversationID: conv, Type: typ, Time: time.Now()}})
	}
	q.hold("running")
	push("running", "reply_applied")
	push("running", "run_started")
	push("idle", "reply_refused")
	at := time.Now()
	ready, wait := q.ready(at.Add(2 * eventLinger))
	if !ready["idle"] || ready["running"] {
		t.Fatalf("past the linger: ready %v; want the idle conversation only", ready)
	}
	if wait <= 0 || wait > eventHoldMax-2*eventLinger {
		t.Errorf("past the linger: next in %s; want the held events' remaining %s at most", wait, eventHoldMax-2*eventLinger)
	}
	if ready, _ := q.ready(at.Add(eventHoldMax)); !ready["running"] {
		t.Errorf("past eventHoldMax: ready %v; want the held events too", ready)
	}
	push("running", "run_completed")
	q.release("running")
	if ready, _ := q.ready(at); !ready["running"] {
		t.Fatalf("after the release, before any linger: ready %v; want the run's events", ready)
	}
	var types []string
	for _, e := range taken(q) {
		if e.ev.ConversationID == "running" {
			types = append(types, e.ev.Type)
		}
	}
	if want := []string{"reply_applied", "run_started", "run_completed"}; !slices.Equal(types, want) {
		t.Errorf("took %v; want the whole step %v in one", types, want)
	}
	// Released and taken, the conversation waits the linger again.
	push("running", "run_started")
	if ready, _ := q.ready(time.Now()); ready["running"] {
		t.Error("an event after the release was ready at once")
	}
}

// A run launched before what it starts from is stored has its own events
// kept apart, and only those: what other paths emit of its conversation
// meanwhile (a cancel, which is what drops the run) goes as usual, and is
// not lost with the run's when it is dropped. Settled, a run's events go
// in their order behind what its conversation queued; dropped, they and
// what it emits until it ends are forgotten.
func TestEventQueueDefersARunAlone(t *testing.T) {
	q := newEventQueue()
	push := func(run, typ string) {
		q.push(queuedEvent{ev: wire.Event{ConversationID: "c", RunID: run, Type: typ, Time: time.Now()}})
	}
	types := func(evs []queuedEvent) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.ev.RunID+":"+e.ev.Type)
		}
		return out
	}
	q.deferRun("c", "r2")
	push("r2", "run_started")
	push("r1", "conversation_cancelled")
	q.dropRun("c", "r2")
	push("r2", "model_response")
	q.close()
	if got, want := types(taken(q)), []string{"r1:conversation_cancelled"}; !slices.Equal(got, want) {
		t.Errorf("a cancel while a deferred run was dropped: took %v; want %v", got, want)
	}

	q = newEventQueue()
	q.deferRun("c", "r2")
	push("r2", "run_started")
	push("r1", "reply_refused")
	if n := q.pending(); n != 1 {
		t.Errorf("%d events queued while the run is deferred; want the other run's 1", n)
	}
	q.settleRun("c", "r2")
	push("r2", "run_completed")
	q.close()
	if got, want := types(taken(q)), []string{"r1:reply_refused", "r2:run_started", "r2:run_completed"}; !slices.Equal(got, want) {
		t.Errorf("settled: took %v; want %v", got, want)
	}

	// Once the dropped run ended, its id may run again (a take-over).
	q = newEventQueue()
	q.deferRun("c", "r2")
	q.dropRun("c", "r2")
	q.runEnded("c", "r2")
	push("r2", "run_started")
	q.close()
	if got, want := types(taken(q)), []string{"r2:run_started"}; !slices.Equal(got, want) {
		t.Errorf("after the dropped run ended: took %v; want %v", got, want)
	}
}

// A run that pauses on calls that machines answer does not release its
// events: they wait, as held ones, for the follow-up a quick reply starts,
// and both steps go as one batch at the follow-up's end; with no reply
// they go once the first is eventHoldMax old, and the conversation lingers
// as usual after. Judged at given times.
func TestEventQueueAwaitsQuickReplies(t *testing.T) {
	q := newEventQueue()
	push := func(typ string) {
		q.push(queuedEvent{ev: wire.Event{ConversationID: "c", Type: typ, Time: time.Now()}})
	}
	at := time.Now()
	q.hold("c")
	push("run_started")
	push("run_paused")
	q.awaitReplies("c")
	q.release("c")
	if ready, wait := q.ready(at.Add(2 * eventLinger)); ready["c"] || wait <= 0 {
		t.Fatalf("after a pause awaiting replies, past the linger: ready %v, next in %s; want the step still waiting", ready, wait)
	}
	// The reply came: its follow-up's end sends both steps.
	push("reply_applied")
	q.hold("c")
	push("run_started")
	push("run_completed")
	q.release("c")
	if ready, _ := q.ready(at); !ready["c"] {
		t.Fatalf("after the follow-up's release: ready %v; want both steps", ready)
	}
	var types []string
	for _, e := range taken(q) {
		types = append(types, e.ev.Type)
	}
	if want := []string{"run_started", "run_paused", "reply_applied", "run_started", "run_completed"}; !slices.Equal(types, want) {
		t.Errorf("took %v; want both steps %v in one", types, want)
	}

	// No reply: the step goes at eventHoldMax, not before.
	at = time.Now()
	q.hold("c")
	push("run_paused")
	q.awaitReplies("c")
	q.release("c")
	if ready, _ := q.ready(at.Add(eventHoldMax / 2)); ready["c"] {
		t.Errorf("half of eventHoldMax after a pause awaiting replies: ready %v; want it waiting", ready)
	}
	if ready, _ := q.ready(at.Add(eventHoldMax + time.Millisecond)); !ready["c"] {
		t.Fatalf("past eventHoldMax: ready %v; want the paused step", ready)
	}
	taken(q)
	if q.awaiting["c"] {
		t.Error("still awaiting after its events were sent; later ones would wait eventHoldMax")
	}

	// A pause on an approval (no awaitReplies) is released at once.
	q.hold("c")
	push("run_paused")
	q.release("c")
	if ready, _ := q.ready(time.Now()); !ready["c"] {
		t.Errorf("after a pause on an approval: ready %v; want it at once", ready)
	}
}

// A held (or awaiting) conversation is ready once eventHoldCount of its
// events are queued, however young: a fast conversation's steps go a few
// at a time, not a quarter second's worth at once.
func TestEventQueueHoldsAFewStepsAtMost(t *testing.T) {
	q := newEventQueue()
	q.hold("c")
	for range eventHoldCount - 1 {
		q.push(queuedEvent{ev: wire.Event{ConversationID: "c", Type: "tool_call", Time: time.Now()}})
	}
	now := time.Now()
	if ready, _ := q.ready(now); ready["c"] {
		t.Fatalf("%d events of a held conversation: ready %v; want them waiting", eventHoldCount-1, ready)
	}
	q.push(queuedEvent{ev: wire.Event{ConversationID: "c", Type: "tool_call", Time: time.Now()}})
	if ready, _ := q.ready(now); !ready["c"] {
		t.Fatalf("%d events of a held conversation: ready %v; want them to go", eventHoldCount, ready)
	}
	if got := taken(q); len(got) != eventHoldCount {
		t.Errorf("took %d events; want %d", len(got), eventHoldCount)
	}
}

// A take stops at eventBatchMax events; what is left of a conversation it
// took from keeps the queue time of its oldest, so it is ready as soon
// after as it would have been, and pushes of it do not make it wait anew.
func TestEventQueueTakesWhatABatchLeft(t *testing.T) {
	q := newEventQueue()
	for range eventBatchMax + 10 {
		q.push(queuedEvent{ev: wire.Event{ConversationID: "c", Type: "tool_call", Time: time.Now()}})
	}
	at := time.Now() // after every push: all are past the linger at at+eventLinger
	if ready, _ := q.ready(at.Add(eventLinger)); !ready["c"] {
		t.Fatalf("past the linger: ready %v; want the conversation", ready)
	}
	if got := taken(q); len(got) != eventBatchMax {
		t.Fatalf("took %d events; want a batch of %d", len(got), eventBatchMax)
	}
	q.push(queuedEvent{ev: wire.Event{ConversationID: "c", Type: "tool_call", Time: time.Now()}})
	if ready, _ := q.ready(at.Add(eventLinger)); !ready["c"] {
		t.Fatalf("the rest of a full batch, past the linger of its oldest: ready %v; want it", ready)
	}
	if got := taken(q); len(got) != 11 {
		t.Errorf("took %d events; want the 10 left and the one pushed since", len(got))
	}
	if len(q.convs) != 0 {
		t.Errorf("an empty queue still counts %d conversations", len(q.convs))
	}
}

// forget drops a conversation's queued events and returns only once the
// events taken before it are published: a delete that purges the
// conversation's events next leaves none behind (a queued event published
// after the purge outlived its conversation).
func TestEventQueueForget(t *testing.T) {
	q := newEventQueue()
	push := func(conv, typ string) {
		q.push(queuedEvent{ev: wire.Event{ConversationID: conv, Type: typ, Time: time.Now()}})
	}
	push("gone", "run_started")
	inFlight := taken(q)
	push("gone", "reply_refused")
	push("kept", "run_started")
	forgotten := make(chan struct{})
	go func() {
		q.forget("gone")
		close(forgotten)
	}()
	select {
	case <-forgotten:
		t.Fatal("forget returned while a batch it may hold events of was still being published")
	case <-time.After(50 * time.Millisecond):
	}
	q.done(len(inFlight))
	<-forgotten
	q.close()
	var left []string
	for _, e := range taken(q) {
		left = append(left, e.ev.ConversationID+"/"+e.ev.Type)
	}
	if want := []string{"kept/run_started"}; !slices.Equal(left, want) {
		t.Errorf("queued after forget: %v, want %v", left, want)
	}
}

// An agent event's data holds every field of agent.Event but those the
// event itself carries: a field added to agent.Event reaches the events.
func TestAgentEventDataFields(t *testing.T) {
	t.Parallel()
	names := func(typ reflect.Type) []string {
		var out []string
		for f := range typ.Fields() {
			out = append(out, strings.Split(f.Tag.Get("json"), ",")[0])
		}
		slices.Sort(out)
		return out
	}
	var want []string
	for _, n := range names(reflect.TypeFor[agent.Event]()) {
		if n != "run_id" && n != "conversation_id" && n != "time" {
			want = append(want, n)
		}
	}
	if got := names(reflect.TypeFor[agentEventData]()); !slices.Equal(got, want) {
		t.Errorf("agentEventData fields %v, want agent.Event's less the event's own: %v", got, want)
	}
	b, err := json.Marshal(agentEventData{Kind: agent.EventTextDelta, Delta: "hi"})
	if err != nil || string(b) != `{"kind":"text_delta","delta":"hi"}` {
		t.Errorf("a text delta's data: %s, %v", b, err)
	}
}

// Each conversation's events are taken as one slice, in their order, and
// the oldest conversation goes first when a take is full; a run's text
// deltas merge though another conversation's events came between them,
// and a held run's events join its conversation's queue whole.
func TestEventQueueKeepsConversationsApart(t *testing.T) {
	q := newEventQueue()
	push := func(conv, run, typ string) {
		ev := queuedEvent{ev: wire.Event{ConversationID: conv, RunID: run, Type: typ, Time: time.Now()}}
		if typ == "text_delta" {
			ev.delta = &agentEventData{Kind: agent.EventTextDelta, Delta: conv + run}
		}
		if !q.push(ev) {
			t.Fatal("push refused")
		}
	}
	push("old", "r1", "run_started")
	push("old", "r1", "text_delta")
	push("new", "r2", "text_delta")
	push("old", "r1", "text_delta")
	push("old", "r3", "text_delta") // another run's delta does not merge
	if !q.pushAll([]queuedEvent{{ev: wire.Event{ConversationID: "new", Type: "tool_call"}}, {ev: wire.Event{ConversationID: "new", Type: "run_paused"}}}) {
		t.Fatal("pushAll refused")
	}
	q.close()
	var got []string
	for _, evs := range q.take() {
		var s []string
		for _, e := range evs {
			if e.ev.ConversationID != evs[0].ev.ConversationID {
				t.Errorf("a slice of %s holds an event of %s", evs[0].ev.ConversationID, e.ev.ConversationID)
			}
			d := ""
			if e.delta != nil {
				d = "=" + e.delta.Delta
			}
			s = append(s, e.ev.Type+d)
		}
		got = append(got, evs[0].ev.ConversationID+":"+strings.Join(s, ","))
	}
	slices.Sort(got)
	want := []string{"new:text_delta=newr2,tool_call,run_paused", "old:run_started,text_delta=oldr1oldr1,text_delta=oldr3"}
	if !slices.Equal(got, want) {
		t.Errorf("took %q\nwant %q", got, want)
	}
	if q.pending() != 6 {
		t.Errorf("pending %d, want the 6 taken and not yet published", q.pending())
	}

	// A full take starts with the oldest conversation.
	q = newEventQueue()
	push("first", "r", "run_started")
	for range eventBatchMax {
		push("second", "r", "tool_call")
	}
	q.close()
	batch := q.take()
	if len(batch) != 2 || batch[0][0].ev.ConversationID != "first" || len(batch[1]) != eventBatchMax-1 {
		t.Fatalf("a full take: %d conversations, the first %s", len(batch), batch[0][0].ev.ConversationID)
	}
	if rest := taken(q); len(rest) != 1 || rest[0].ev.ConversationID != "second" {
		t.Errorf("left after a full take: %d events", len(rest))
	}
}

// Events emitted at once by many runs of many conversations, some
// deferred and settled, some deferred and dropped, text deltas among them, are each
// published once, in their conversation's order, and a dropped run's
// never: the arrays that queue them are used again, and one used again
// too early would show here as a lost, repeated or foreign event.
func TestEventPublisherUnderLoad(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	p := newEventPublisher(b, slog.New(slog.DiscardHandler), time.Now)
	go p.loop()

	const convs, steps = 40, 30
	var wg sync.WaitGroup
	for c := range convs {
		wg.Go(func() {
			conv := fmt.Sprintf("load%02d", c)
			ctx := t.Context()
			for s := range steps {
				run := fmt.Sprintf("r%d_%s", s, conv)
				emit := func(ctx context.Context, typ string) {
					p.publish(ctx, conv, run, typ, "", map[string]int{"step": s})
				}
				switch s % 3 {
				case 0: // straight to the queue
					emit(ctx, "run_started")
					p.agentEvent(ctx, conv, run, agent.Event{Kind: agent.EventTextDelta, Delta: "a"})
					p.agentEvent(ctx, conv, run, agent.Event{Kind: agent.EventTextDelta, Delta: "b"})
					emit(ctx, "run_completed")
				case 1: // deferred, then settled
					p.runBegan(conv, run, true)
					emit(ctx, "run_started")
					emit(ctx, "run_paused")
					p.settleRun(conv, run)
					emit(ctx, "run_completed")
					p.runEnded(conv, run)
				case 2: // deferred, then dropped
					p.runBegan(conv, run, true)
					emit(ctx, "dropped")
					p.dropRun(conv, run)
					emit(ctx, "dropped")
					p.runEnded(conv, run)
				}
			}
		})
	}
	wg.Wait()
	p.stop(t.Context())

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for c := range convs {
		conv := fmt.Sprintf("load%02d", c)
		var want []string
		for s := range steps {
			switch s % 3 {
			case 0:
				want = append(want, fmt.Sprintf("%d:run_started", s), fmt.Sprintf("%d:text_delta=ab", s), fmt.Sprintf("%d:run_completed", s))
			case 1:
				want = append(want, fmt.Sprintf("%d:run_started", s), fmt.Sprintf("%d:run_paused", s), fmt.Sprintf("%d:run_completed", s))
			}
		}
		// Deltas queued back to back merge when the publisher has not
		// taken the first yet: however they were split, their text is one.
		var got []string
		others := 0
		for se, err := range b.Events(ctx, conv, 0) {
			if err != nil {
				t.Fatalf("%s: %v; published so far %v", conv, err, got)
			}
			ev := se.Event
			if ev.ConversationID != conv {
				t.Fatalf("%s: an event of %s", conv, ev.ConversationID)
			}
			var d struct {
				Step  int    `json:"step"`
				Delta string `json:"delta"`
			}
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatalf("%s: %s data %s: %v", conv, ev.Type, ev.Data, err)
			}
			if ev.Type != "text_delta" {
				got = append(got, fmt.Sprintf("%d:%s", d.Step, ev.Type))
				if others++; others == len(want)-steps/3 {
					break
				}
				continue
			}
			if _, err := fmt.Sscanf(ev.RunID, "r%d_", &d.Step); err != nil {
				t.Fatalf("%s: a delta of run %s", conv, ev.RunID)
			}
			key := fmt.Sprintf("%d:text_delta=", d.Step)
			if n := len(got); n > 0 && strings.HasPrefix(got[n-1], key) {
				got[n-1] += d.Delta
			} else {
				got = append(got, key+d.Delta)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s published\n%v\nwant\n%v", conv, got, want)
		}
	}
}

// An event's data (bus.EncodePooled) is json.Marshal's bytes, from a
// buffer used again once given back: a value encoded after a large one
// (past what the pool keeps, 64 KiB) and after a release holds only its
// own bytes.
func TestEventDataIsMarshal(t *testing.T) {
	t.Parallel()
	part := &agent.Part{Kind: agent.PartToolCall, ToolName: "noop", ToolCallID: "call_1", Args: json.RawMessage(`{"q": "<a & b>"}`)}
	values := []any{
		agentEventData{Kind: agent.EventToolCall, Part: part},
		map[string]any{"output": strings.Repeat("x", 64<<10+1)},
		agentEventData{Kind: agent.EventTextDelta, Delta: "a <b> & \u2028"},
		json.RawMessage(`{ "spaced" : [1, 2] }`),
		nil,
	}
	for i, v := range values {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		got, e, err := bus.EncodePooled(v, wire.ContentTypeJSON)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("value %d: %s, want %s", i, got, want)
		}
		bus.ReleaseEncoded(e)
	}
	if _, _, err := bus.EncodePooled(func() {}, wire.ContentTypeJSON); err == nil {
		t.Error("a value JSON cannot hold was encoded")
	}
}
