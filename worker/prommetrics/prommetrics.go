// Package prommetrics counts a worker's calls in Prometheus collectors, the
// ones tool-worker serves at /metrics:
//
//	toolgate_tool_calls_total{tool,outcome}     calls handled
//	toolgate_tool_call_seconds{tool}            handler run time
//	toolgate_tool_calls_in_flight{tool}         calls running now
//	toolgate_redeliveries_total{component="worker",tool}
//	toolgate_dead_letters_total{component="worker",reason}
//
// It is a package of its own so that a worker without metrics does not
// link the Prometheus client:
//
//	w, err := worker.New(nc, worker.Config{Metrics: prommetrics.New(prometheus.DefaultRegisterer)})
package prommetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/internal/telemetry/promreg"
	"github.com/toolgate/toolgate/worker"
)

// component is the value of the component label of the collectors shared
// with the other components.
const component = "worker"

// callBuckets are the bounds, in seconds, of the run-time histogram: from
// a lookup to a long job.
var callBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// Metrics are a worker's collectors; it implements worker.Metrics. A nil
// *Metrics records nothing.
type Metrics struct {
	calls        *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	inFlight     *prometheus.GaugeVec
	redeliveries *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
}

var _ worker.Metrics = (*Metrics)(nil)

// New registers the worker's collectors on reg. Collectors registered
// already (two workers on one registry) are shared.
func New(reg prometheus.Registerer) *Metrics {
	return &Metrics{
		calls: promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_tool_calls_total",
			Help: "Tool calls a worker handled, by tool and outcome (return, retry, failed, expired, error, interrupted, publish_error).",
		}, []string{"tool", "outcome"})),
		duration: promreg.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolgate_tool_call_seconds",
			Help:    "Time a tool's executor took to run one call.",
			Buckets: callBuckets,
		}, []string{"tool"})),
		inFlight: promreg.Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "toolgate_tool_calls_in_flight",
			Help: "Tool calls running in this worker now.",
		}, []string{"tool"})),
		redeliveries: promreg.Redeliveries(reg),
		deadLetters:  promreg.DeadLetters(reg),
	}
}

// CallStarted counts a call as in flight.
func (m *Metrics) CallStarted(tool string) {
	if m == nil {
		return
	}
	m.inFlight.WithLabelValues(tool).Inc()
}

// CallFinished ends a call CallStarted began: it is no longer in flight and
// is counted under outcome. took is the handler's run time; a negative
// took (the handler did not run) is not observed.
func (m *Metrics) CallFinished(tool, outcome string, took time.Duration) {
	if m == nil {
		return
	}
	m.inFlight.WithLabelValues(tool).Dec()
	m.calls.WithLabelValues(tool, outcome).Inc()
	if took >= 0 {
		m.duration.WithLabelValues(tool).Observe(took.Seconds())
	}
}

// CallSkipped counts a call that ended without running (handed back while
// the worker stopped), without touching the in-flight gauge.
func (m *Metrics) CallSkipped(tool, outcome string) {
	if m == nil {
		return
	}
	m.calls.WithLabelValues(tool, outcome).Inc()
}

// Redelivered counts a call delivered more than once.
func (m *Metrics) Redelivered(tool string) {
	if m == nil {
		return
	}
	m.redeliveries.WithLabelValues(component, tool).Inc()
}

// DeadLetter counts a call dead-lettered, by a reason from a fixed list.
func (m *Metrics) DeadLetter(reason string) {
	if m == nil {
		return
	}
	m.deadLetters.WithLabelValues(component, reason).Inc()
}
