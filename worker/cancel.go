package worker

import (
	"context"
	"errors"
	"sync"
)

// errRunCancelled is the cause of a call's context when its conversation
// was cancelled.
var errRunCancelled = errors.New("conversation cancelled")

// recentCancelsMax bounds the cancelled runs remembered for calls that
// start after their notice (fetched, or waiting for a slot, when it came).
const recentCancelsMax = 4096

// cancels stops the calls of cancelled conversations. The orchestrator
// announces a cancel on toolgate.cancel.<run> (a core NATS notice, not
// stored); the worker subscribes to every run's notice once and cancels the
// handler's context of each call of that run in flight, then acks the
// call without a reply. A call of a cancelled run that starts later is
// skipped the same way while the run is remembered. A notice that is lost
// costs only the work: the call runs to its end and its reply is refused
// as late and recorded.
type cancels struct {
	mu     sync.Mutex
	calls  map[string]map[*callCancel]struct{}
	recent map[string]struct{}
	order  []string
	oldest int
}

type callCancel struct{ cancel context.CancelCauseFunc }

// register ties ctx to run runID's cancel notice; the call must call the
// returned release when it ends. It reports false when the run was
// cancelled already.
func (c *cancels) register(ctx context.Context, runID string) (context.Context, func(), bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	cc := &callCancel{cancel: cancel}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.recent[runID]; ok {
		cancel(errRunCancelled)
		return ctx, func() {}, false
	}
	if c.calls == nil {
		c.calls = map[string]map[*callCancel]struct{}{}
	}
	if c.calls[runID] == nil {
		c.calls[runID] = map[*callCancel]struct{}{}
	}
	c.calls[runID][cc] = struct{}{}
	return ctx, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.calls[runID], cc)
		if len(c.calls[runID]) == 0 {
			delete(c.calls, runID)
		}
		cancel(nil)
	}, true
}

// cancel stops run runID's calls in flight and remembers the run.
func (c *cancels) cancel(runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for cc := range c.calls[runID] {
		cc.cancel(errRunCancelled)
	}
	if c.recent == nil {
		c.recent = map[string]struct{}{}
	}
	if _, ok := c.recent[runID]; ok {
		return
	}
	if len(c.order) < recentCancelsMax {
		c.order = append(c.order, runID)
	} else {
		delete(c.recent, c.order[c.oldest])
		c.order[c.oldest] = runID
		c.oldest = (c.oldest + 1) % recentCancelsMax
	}
	c.recent[runID] = struct{}{}
}

// cancelled reports whether ctx ended because its run was cancelled.
func cancelled(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errRunCancelled)
}
