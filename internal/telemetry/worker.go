package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/wire"
)

// Outcomes of a tool call as the worker counts them: the reply outcomes
// of the wire contract plus the ends that publish no reply.
const (
	CallOutcomeReturn       = string(wire.OutcomeReturn)
	CallOutcomeRetry        = string(wire.OutcomeRetry)
	CallOutcomeFailed       = string(wire.OutcomeFailed)
	CallOutcomeExpired      = "expired"       // the deadline passed before it ran; a failed reply was sent
	CallOutcomeError        = "error"         // the executor hit an infrastructure error; redelivered later
	CallOutcomeInterrupted  = "interrupted"   // shutdown cut it short; handed back
	CallOutcomeCancelled    = "cancelled"     // its conversation was cancelled; stopped without a reply
	CallOutcomeWithdrawn    = "withdrawn"     // the orchestrator took it out of the queue before it ran; not run, no reply
	CallOutcomePublishError = "publish_error" // ran, but its reply could not be published; redelivered later
)

// WorkerMetrics are a tool-worker's collectors:
//
//	toolgate_tool_calls_total{tool,outcome}     calls handled
//	toolgate_tool_call_seconds{tool}            executor run time
//	toolgate_tool_calls_in_flight{tool}         calls running now
//	toolgate_redeliveries_total{component="worker",tool}
//	toolgate_dead_letters_total{component="worker",reason}
//
// A nil *WorkerMetrics records nothing.
type WorkerMetrics struct {
	calls        *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	inFlight     *prometheus.GaugeVec
	redeliveries *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
}

// NewWorkerMetrics registers the worker's collectors on reg.
func NewWorkerMetrics(reg prometheus.Registerer) *WorkerMetrics {
	return &WorkerMetrics{
		calls: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_tool_calls_total",
			Help: "Tool calls a worker handled, by tool and outcome (return, retry, failed, expired, error, interrupted, publish_error).",
		}, []string{"tool", "outcome"})),
		duration: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolgate_tool_call_seconds",
			Help:    "Time a tool's executor took to run one call.",
			Buckets: callBuckets,
		}, []string{"tool"})),
		inFlight: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "toolgate_tool_calls_in_flight",
			Help: "Tool calls running in this worker now.",
		}, []string{"tool"})),
		redeliveries: redeliveries(reg),
		deadLetters:  deadLetters(reg),
	}
}

// CallStarted counts a call as in flight.
func (m *WorkerMetrics) CallStarted(tool string) {
	if m == nil {
		return
	}
	m.inFlight.WithLabelValues(tool).Inc()
}

// CallFinished ends a call CallStarted began: it is no longer in flight and
// is counted under outcome. took is the executor's run time; a negative
// took (the executor did not run) is not observed.
func (m *WorkerMetrics) CallFinished(tool, outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.inFlight.WithLabelValues(tool).Dec()
	m.calls.WithLabelValues(tool, outcome).Inc()
	if took >= 0 {
		m.duration.WithLabelValues(tool).Observe(seconds(took))
	}
}

// CallSkipped counts a call that ended without running (handed back while
// the worker stopped), without touching the in-flight gauge.
func (m *WorkerMetrics) CallSkipped(tool, outcome string) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(tool, outcome).Inc()
}

// Redelivered counts a call delivered more than once.
func (m *WorkerMetrics) Redelivered(tool string) {
	if m == nil {
		return
	}
	m.redeliveries.WithLabelValues(ComponentWorker, tool).Inc()
}

// DeadLetter counts a call the worker dead-lettered, by a reason from a
// fixed list (bus.DLQDecode, DLQInvalid, DLQHandler).
func (m *WorkerMetrics) DeadLetter(reason string) {
	if m == nil {
		return
	}
	m.deadLetters.WithLabelValues(ComponentWorker, reason).Inc()
}
