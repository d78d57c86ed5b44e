package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/worker"
	"github.com/toolgate/toolgate/worker/prommetrics"
)

// Outcomes of a tool call as the worker counts them (worker.Outcome…):
// the reply outcomes of the wire contract plus the ends that publish no
// reply.
const (
	CallOutcomeReturn       = worker.OutcomeReturn
	CallOutcomeRetry        = worker.OutcomeRetry
	CallOutcomeFailed       = worker.OutcomeFailed
	CallOutcomeExpired      = worker.OutcomeExpired
	CallOutcomeError        = worker.OutcomeError
	CallOutcomeInterrupted  = worker.OutcomeInterrupted
	CallOutcomeCancelled    = worker.OutcomeCancelled
	CallOutcomeWithdrawn    = worker.OutcomeWithdrawn
	CallOutcomePublishError = worker.OutcomePublishError
)

// WorkerMetrics are a tool-worker's collectors (prommetrics.Metrics). A
// nil *WorkerMetrics records nothing.
type WorkerMetrics = prommetrics.Metrics

// NewWorkerMetrics registers the worker's collectors on reg.
func NewWorkerMetrics(reg prometheus.Registerer) *WorkerMetrics { return prommetrics.New(reg) }
