package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ApproverMetrics are an approver's collectors:
//
//	toolgate_decisions_total{approver,action}          requests handled, by what was done
//	toolgate_approver_decision_seconds{approver,action} request stored in the stream → decision published
//	toolgate_redeliveries_total{component="approver",tool}
//	toolgate_dead_letters_total{component="approver",reason}
//
// action is approved, denied, escalated, expired or duplicate. A nil
// *ApproverMetrics records nothing.
type ApproverMetrics struct {
	decisions    *prometheus.CounterVec
	latency      *prometheus.HistogramVec
	redeliveries *prometheus.CounterVec
	deadLetters  *prometheus.CounterVec
}

// NewApproverMetrics registers the approver's collectors on reg.
func NewApproverMetrics(reg prometheus.Registerer) *ApproverMetrics {
	return &ApproverMetrics{
		decisions: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_decisions_total",
			Help: "Approval requests an approver handled, by approver id and action (approved, denied, escalated, expired, duplicate).",
		}, []string{"approver", "action"})),
		latency: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolgate_approver_decision_seconds",
			Help:    "Time from an approval request being stored in its stream to this approver publishing a decision (human time included).",
			Buckets: waitBuckets,
		}, []string{"approver", "action"})),
		redeliveries: redeliveries(reg),
		deadLetters:  deadLetters(reg),
	}
}

// Handled counts one request by what the approver did with it.
func (m *ApproverMetrics) Handled(approver, action string) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(approver, action).Inc()
}

// Decided records the time from the request's publication to the
// decision's, for a published decision (action approved or denied).
func (m *ApproverMetrics) Decided(approver, action string, took time.Duration) {
	if m == nil {
		return
	}
	m.latency.WithLabelValues(approver, action).Observe(seconds(max(took, 0)))
}

// Redelivered counts a request delivered more than once.
func (m *ApproverMetrics) Redelivered(tool string) {
	if m == nil {
		return
	}
	m.redeliveries.WithLabelValues(ComponentApprover, tool).Inc()
}

// DeadLetter counts a request the approver dead-lettered, by a reason from
// a fixed list.
func (m *ApproverMetrics) DeadLetter(reason string) {
	if m == nil {
		return
	}
	m.deadLetters.WithLabelValues(ComponentApprover, reason).Inc()
}
