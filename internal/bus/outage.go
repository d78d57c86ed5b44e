package bus

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// pullOutage makes the consume loops' errors of one outage one warning.
// While the server is away (restarted, unreachable), every pull of every
// consumer fails, again at each retry: a worker serving ten tools logged
// ten warnings every few seconds, saying one thing. The first error of an
// outage is a warning, the next ones are at debug level, and its end is
// said once the server answers JetStream requests again.
type pullOutage struct {
	// probeEvery is how often the end of an outage is looked for.
	probeEvery time.Duration

	mu     sync.Mutex
	since  time.Time // zero: no outage
	errors int
	timer  *time.Timer
}

// pullOutageProbe is how often the end of an outage is looked for; a
// JetStream request that answers ends it.
const pullOutageProbe = time.Second

// failed is told of a consume loop's error; it reports whether the error
// begins an outage (to be logged as a warning).
func (b *Bus) pullFailed() bool {
	o := &b.outage
	o.mu.Lock()
	defer o.mu.Unlock()
	o.errors++
	if !o.since.IsZero() {
		return false
	}
	o.since = time.Now()
	every := o.probeEvery
	if every <= 0 {
		every = pullOutageProbe
	}
	o.timer = time.AfterFunc(every, func() { b.probeOutage(every) })
	return true
}

// probeOutage ends the outage once a JetStream request answers, and looks
// again after every otherwise. A closed connection ends it unsaid.
func (b *Bus) probeOutage(every time.Duration) {
	if b.nc.IsClosed() {
		b.endOutage()
		return
	}
	if b.nc.IsConnected() {
		ctx, cancel := context.WithTimeout(context.Background(), every)
		_, err := b.js.AccountInfo(ctx)
		cancel()
		if err == nil {
			if since, n := b.endOutage(); !since.IsZero() {
				b.logger.Info("consumers pull again: the server answers",
					slog.Duration("after", time.Since(since).Round(time.Millisecond)), slog.Int("pull_errors", n))
			}
			return
		}
	}
	o := &b.outage
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.since.IsZero() {
		o.timer = time.AfterFunc(every, func() { b.probeOutage(every) })
	}
}

// endOutage clears the outage and returns when it began (zero when there
// was none) and how many pull errors it had.
func (b *Bus) endOutage() (time.Time, int) {
	o := &b.outage
	o.mu.Lock()
	defer o.mu.Unlock()
	since, n := o.since, o.errors
	o.since, o.errors = time.Time{}, 0
	if o.timer != nil {
		o.timer.Stop()
		o.timer = nil
	}
	return since, n
}
