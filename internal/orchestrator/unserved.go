package orchestrator

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// How often a tool's consumer is looked at when its calls are published,
// and how long a tool found without takers is given before it counts as
// unserved: a worker between two pull requests, or one that just started,
// has none waiting for a moment.
const (
	takersCheckEvery = 10 * time.Second
	takersRecheck    = 2 * time.Second
)

// unservedCalls tells, when calls are published, that no worker takes the
// calls of their tool: such a call waits in the stream until its deadline
// and then fails "timed out", which without a word looks like a slow
// tool. Whether a tool has workers comes from its consumer (pull requests
// waiting, calls held), not from adverts: a worker in another language
// may serve a tool without advertising it, and an advert outlives a
// worker killed without notice until its TTL.
//
// A tool is looked at once per takersCheckEvery at most, off the call's
// way: the calls published meanwhile wait for the answer of the look under
// way, or take the last one. Each call of an unserved tool gets a
// tool_unserved event on its conversation; the log says it once per tool
// until a worker takes its calls again.
type unservedCalls struct {
	// takers reports whether anyone takes calls of tool now.
	takers func(ctx context.Context, tool string) (bool, error)
	// emit publishes an event (eventPublisher.publish).
	emit  func(ctx context.Context, convID, runID, typ, callID string, data any)
	log   *slog.Logger
	clock func() time.Time
	// onUnserved is told of each call no worker takes (the observer's
	// unservedCall).
	onUnserved func(tool string)
	// every and recheck are takersCheckEvery and takersRecheck, shorter
	// in tests.
	every, recheck time.Duration

	mu    sync.Mutex
	tools map[string]*toolTakers
	// telling counts the calls a finished look is telling about.
	telling int
	ctx     context.Context // cancelled when the orchestrator stops
	wg      sync.WaitGroup
}

// toolTakers is what is known of one tool's takers.
type toolTakers struct {
	checked  time.Time // when the last look ended; zero: never
	unserved bool      // what the last look found
	looking  bool
	// waiting are the calls published while a look is under way.
	waiting []unservedCall
}

// unservedCall is a published call to tell about if its tool is unserved.
type unservedCall struct {
	convID, runID, callID string
	deadline              time.Time
}

func newUnservedCalls(ctx context.Context, b *bus.Bus, events *eventPublisher, log *slog.Logger, clock func() time.Time, onUnserved func(string)) *unservedCalls {
	return &unservedCalls{
		takers: func(ctx context.Context, tool string) (bool, error) {
			waiting, unacked, err := b.CallTakers(ctx, tool)
			return waiting > 0 || unacked > 0, err
		},
		emit: events.publish, log: log, clock: clock, onUnserved: onUnserved,
		every: takersCheckEvery, recheck: takersRecheck,
		tools: map[string]*toolTakers{}, ctx: ctx,
	}
}

// published is told of the external calls just published for tool; it
// does not wait.
func (u *unservedCalls) published(tool string, calls []unservedCall) {
	if u.knownUnserved(tool, calls) {
		u.tell(tool, calls)
	}
}

// knownUnserved reports whether the last look, recent enough, found tool
// unserved; otherwise it has calls wait for the look under way, or starts
// one.
func (u *unservedCalls) knownUnserved(tool string, calls []unservedCall) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	t := u.tools[tool]
	if t == nil {
		t = &toolTakers{}
		u.tools[tool] = t
	}
	if t.looking {
		t.waiting = append(t.waiting, calls...)
		return false
	}
	if !t.checked.IsZero() && u.clock().Sub(t.checked) < u.every {
		return t.unserved
	}
	if u.ctx.Err() != nil {
		return false
	}
	t.looking = true
	t.waiting = append(t.waiting[:0], calls...)
	u.wg.Add(1)
	go u.look(tool)
	return false
}

// look finds out whether tool has takers, giving it recheck to get one.
func (u *unservedCalls) look(tool string) {
	defer u.wg.Done()
	served, err := u.takers(u.ctx, tool)
	if err == nil && !served {
		t := time.NewTimer(u.recheck)
		select {
		case <-u.ctx.Done():
			t.Stop()
			err = u.ctx.Err()
		case <-t.C:
			served, err = u.takers(u.ctx, tool)
		}
	}
	if calls, warn := u.found(tool, served, err); len(calls) > 0 {
		if warn {
			u.log.Warn("no worker takes calls of tool (none pulls them, none holds one): its calls wait until a worker comes or their deadline passes",
				slog.String("tool", tool), slog.Int("calls", len(calls)))
		}
		u.tell(tool, calls)
		u.mu.Lock()
		u.telling -= len(calls)
		u.mu.Unlock()
	}
}

// pending counts the calls whose tool_unserved event may be still to come:
// those waiting for a look under way, and those a look is telling about.
func (u *unservedCalls) pending() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := u.telling
	for _, t := range u.tools {
		n += len(t.waiting)
	}
	return n
}

// found records what a look at tool found and returns the calls to tell
// about, and whether the tool was served before.
func (u *unservedCalls) found(tool string, served bool, err error) (tell []unservedCall, warn bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	t := u.tools[tool]
	t.looking = false
	calls := t.waiting
	t.waiting = nil
	if err != nil {
		// Not known: looked at again with the next call.
		if u.ctx.Err() == nil {
			u.log.Debug("look at a tool's consumer", slog.String("tool", tool), slog.String("error", err.Error()))
		}
		return nil, false
	}
	was := t.unserved
	t.checked, t.unserved = u.clock(), !served
	if served {
		if was {
			u.log.Info("a worker takes calls of the tool again", slog.String("tool", tool))
		}
		return nil, false
	}
	u.telling += len(calls)
	return calls, !was
}

// tell emits a tool_unserved event for each call.
func (u *unservedCalls) tell(tool string, calls []unservedCall) {
	for _, c := range calls {
		u.emit(u.ctx, c.convID, c.runID, EventToolUnserved, c.callID, wire.ToolUnserved{
			Tool:     tool,
			Reason:   "no worker takes calls of " + tool + ": the call waits until one does or its deadline passes",
			Deadline: c.deadline.UTC(),
		})
		if u.onUnserved != nil {
			u.onUnserved(tool)
		}
	}
}

// stop waits for the looks under way, once ctx is cancelled.
func (u *unservedCalls) stop() { u.wg.Wait() }
