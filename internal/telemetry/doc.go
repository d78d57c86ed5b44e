// Package telemetry holds toolgate's metrics and traces.
//
// Metrics are Prometheus collectors named toolgate_*, one struct per
// component (WorkerMetrics, ApproverMetrics, OrchestratorMetrics), each
// registered on a registry its caller owns; Handler and Serve expose a
// registry as /metrics. Every method of those structs accepts a nil
// receiver and does nothing, so components take them as an optional Config
// field. Labels hold only bounded values: tool names from configuration,
// kinds, outcomes and reasons from fixed lists; never run or call ids.
//
// Traces use OpenTelemetry with the W3C TraceContext format. The trace
// context rides in NATS headers (traceparent, tracestate): Inject writes the
// context of a ctx into a nats.Header, Extract reads it back, so that a run,
// the worker or approver that answers one of its calls and the follow-up run
// that the answer completes all belong to one trace. Tracing is off unless
// the standard OTEL_* variables ask for an exporter (Setup); with it off the
// trace context still passes through unchanged.
package telemetry
