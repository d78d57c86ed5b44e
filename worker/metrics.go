package worker

import (
	"time"

	"github.com/toolgate/toolgate/wire"
)

// Outcomes of a call as a worker counts them (Metrics): the reply outcomes
// of the wire contract plus the ends that publish no reply.
const (
	OutcomeReturn       = string(wire.OutcomeReturn)
	OutcomeRetry        = string(wire.OutcomeRetry)
	OutcomeFailed       = string(wire.OutcomeFailed)
	OutcomeExpired      = "expired"       // the deadline passed before it ran; a failed reply was sent
	OutcomeError        = "error"         // the handler returned an error of its surroundings; delivered again later
	OutcomeInterrupted  = "interrupted"   // shutdown cut it short; handed back
	OutcomeCancelled    = "cancelled"     // its conversation was cancelled; stopped without a reply
	OutcomeWithdrawn    = "withdrawn"     // the orchestrator took it out of the queue before it ran; not run, no reply
	OutcomePublishError = "publish_error" // ran, but its reply could not be published; delivered again later
)

// Metrics receives the count of every call a worker takes, including those
// no handler ran (a call whose deadline passed before it started, one
// handed back by a drain, one whose reply could not be published), which a
// middleware does not see. Its methods are called from many goroutines at
// once. Package prommetrics implements it with Prometheus collectors.
type Metrics interface {
	// CallStarted counts a call as in flight.
	CallStarted(tool string)
	// CallFinished ends a call CallStarted began, with its outcome (an
	// Outcome… constant); took is the handler's run time, negative when
	// the handler did not run.
	CallFinished(tool, outcome string, took time.Duration)
	// CallSkipped counts a call that ended without starting (handed back
	// while the worker stopped).
	CallSkipped(tool, outcome string)
	// Redelivered counts a call delivered more than once.
	Redelivered(tool string)
}

// noMetrics is Metrics when Config.Metrics is nil.
type noMetrics struct{}

func (noMetrics) CallStarted(string)                         {}
func (noMetrics) CallFinished(string, string, time.Duration) {}
func (noMetrics) CallSkipped(string, string)                 {}
func (noMetrics) Redelivered(string)                         {}
