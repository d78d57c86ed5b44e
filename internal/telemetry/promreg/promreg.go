// Package promreg holds the Prometheus collectors several components
// register on one registry (the worker's, in package prommetrics, and the
// orchestrator's, in package telemetry), defined once so that a registry
// holding both gets one consistent definition of each.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg, or returns the collector already registered
// under the same description (a component started twice on one registry
// shares its counters). It panics on any other conflict: collectors are
// defined in code.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(fmt.Sprintf("telemetry: register collector: %v", err))
}

// Redeliveries is toolgate_redeliveries_total{component,tool}.
func Redeliveries(reg prometheus.Registerer) *prometheus.CounterVec {
	return Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_redeliveries_total",
		Help: "Messages handled again after an earlier delivery (JetStream NumDelivered > 1), by component and tool.",
	}, []string{"component", "tool"}))
}

// DeadLetters is toolgate_dead_letters_total{component,reason}.
func DeadLetters(reg prometheus.Registerer) *prometheus.CounterVec {
	return Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_dead_letters_total",
		Help: "Messages a component gave up on and sent to the dead-letter stream, by component and reason.",
	}, []string{"component", "reason"}))
}
