package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// batchTimeout bounds the wait for one batch's replies; a batch that takes
// longer means a lost message or a stuck worker, not a slow machine.
const batchTimeout = time.Minute

// batch is one paused run's deferred calls in flight.
type batch struct {
	run          string
	conversation string
	calls        []string
	sent         []time.Time
	replied      []time.Time
	remaining    atomic.Int32
	done         chan struct{}
	completed    time.Time
}

func newBatch(run, conversation string, size int) *batch {
	b := &batch{
		run:          run,
		conversation: conversation,
		calls:        make([]string, size),
		sent:         make([]time.Time, size),
		replied:      make([]time.Time, size),
		done:         make(chan struct{}),
	}
	for i := range size {
		b.calls[i] = toolCallID(run, i)
	}
	b.remaining.Store(int32(size))
	return b
}

// arrive records call i's reply. The last arrival completes the batch, at
// the latest of the replies' times: replies settled on goroutines of their
// own can arrive in another order than they were timed, and the last to
// arrive may have been timed before another (then a call's reply came
// after its batch was complete; TestTargetsRoundTrip saw it in the core
// NATS target). The atomic decrement orders every replied[i] write before
// the last arrival reads them and before close(done).
func (b *batch) arrive(i int, at time.Time) {
	b.replied[i] = at
	if b.remaining.Add(-1) == 0 {
		last := at
		for _, t := range b.replied {
			if t.After(last) {
				last = t
			}
		}
		b.completed = last
		close(b.done)
	}
}

// registry maps tool call ids of calls in flight to their batch, for
// consumers that see replies of every batch.
type registry struct{ m sync.Map }

type slot struct {
	b *batch
	i int
}

func (r *registry) add(b *batch) {
	for i, id := range b.calls {
		r.m.Store(id, slot{b, i})
	}
}

// arrive settles a reply; a duplicate or unknown id is ignored, as the
// orchestrator ignores a second reply for a settled call.
func (r *registry) arrive(id string, at time.Time) {
	v, ok := r.m.LoadAndDelete(id)
	if !ok {
		return
	}
	s := v.(slot)
	s.b.arrive(s.i, at)
}

// sendFunc publishes a batch's calls; the replies arrive elsewhere.
type sendFunc func(ctx context.Context, b *batch) error

// failure keeps the first error of background handlers (workers, reply
// consumers) and lets the driver stop waiting as soon as there is one.
type failure struct {
	mu  sync.Mutex
	err error
	ch  chan struct{}
	// stalls counts pulls the client gave up on after missed heartbeats
	// (not a failure: it pulls again, after up to two heartbeats of nothing).
	stalls atomic.Int64
}

func (f *failure) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return
	}
	f.err = err
	if f.ch == nil {
		f.ch = make(chan struct{})
	}
	close(f.ch)
}

func (f *failure) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// failed is closed by the first set.
func (f *failure) failed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch == nil {
		f.ch = make(chan struct{})
	}
	return f.ch
}

// drive runs batches of c.Batch calls through send, c.Conversations() at
// a time, until n batches are done, and measures them.
func drive(ctx context.Context, c Case, n int, prefix string, send sendFunc, reg *registry, bg *failure) (Measurement, error) {
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, n*c.Batch)
		replies   = make([]time.Duration, 0, n*c.Batch)
		done      = make([]time.Time, 0, n)
	)
	g, gctx := errgroup.WithContext(ctx)
	failed := bg.failed()
	alloc0, cpu0 := allocated(), cpuUsed()
	start := time.Now()
	for conv := range c.Conversations() {
		conversation := fmt.Sprintf("conv_%s%06d", prefix, conv)
		g.Go(func() error {
			var (
				lat, rep []time.Duration
				at       []time.Time
			)
			for {
				i := next.Add(1)
				if i > int64(n) {
					break
				}
				b := newBatch(runID(prefix, i), conversation, c.Batch)
				if reg != nil {
					reg.add(b)
				}
				if err := send(gctx, b); err != nil {
					return fmt.Errorf("send batch %s: %w", b.run, err)
				}
				timer := time.NewTimer(batchTimeout)
				select {
				case <-failed:
					timer.Stop()
					return bg.get()
				case <-b.done:
					timer.Stop()
				case <-gctx.Done():
					timer.Stop()
					return gctx.Err()
				case <-timer.C:
					err := fmt.Errorf("batch %s: %d of %d replies after %s", b.run,
						c.Batch-int(b.remaining.Load()), c.Batch, batchTimeout)
					if bgErr := bg.get(); bgErr != nil {
						err = fmt.Errorf("%w; first handler error: %w", err, bgErr)
					}
					return err
				}
				at = append(at, b.completed)
				for j := range b.sent {
					lat = append(lat, b.completed.Sub(b.sent[j]))
					rep = append(rep, b.replied[j].Sub(b.sent[j]))
				}
			}
			mu.Lock()
			latencies = append(latencies, lat...)
			replies = append(replies, rep...)
			done = append(done, at...)
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		if bgErr := bg.get(); bgErr != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil {
			err = bgErr
		}
		return Measurement{}, err
	}
	elapsed := time.Since(start)
	return Measurement{
		Calls:      len(latencies),
		Elapsed:    elapsed,
		Latency:    Summarize(latencies),
		Reply:      Summarize(replies),
		Gap:        longestGap(start, done),
		AllocBytes: allocatedPer(alloc0, len(latencies)),
		CPU:        cpuPer(cpu0, len(latencies)),
	}, nil
}

// warmAndMeasure runs the warm-up batches, then the measured ones.
func warmAndMeasure(ctx context.Context, c Case, prefix string, send sendFunc, reg *registry, bg *failure) (Measurement, error) {
	if w := c.WarmupBatches(); w > 0 {
		if _, err := drive(ctx, c, w, prefix+"w", send, reg, bg); err != nil {
			return Measurement{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	return drive(ctx, c, c.Batches(), prefix+"m", send, reg, bg)
}
