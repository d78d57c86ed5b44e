// Package worker serves toolgate tool calls from Go: register a handler per
// tool, then Run. A worker pulls its tools' calls from JetStream (each tool
// on the durable consumer every worker of that tool shares), runs them at
// most Concurrency at a time, publishes each reply with the id that makes a
// second publish a duplicate, acknowledges the call only after its reply is
// stored, keeps long calls alive with in-progress acks, and on shutdown
// drains: it stops fetching, lets calls in flight finish and hands the rest
// back for another worker. It advertises its tools, with their JSON Schemas,
// in the toolgate_tools bucket (executor "go"), so an agent's discover:
// entries offer them to the model without the schemas repeated in the
// agent file.
//
//	w, _ := worker.New(nc, worker.Config{ID: "weather-1"})
//	worker.Register(w, "get_weather", "Current weather of a city",
//		func(ctx context.Context, call worker.Call, a struct{ City string `json:"city"` }) (string, error) {
//			return "sunny in " + a.City, nil
//		})
//	err := w.Run(ctx)
//
// # Answers
//
// A handler answers with a value (outcome return), with Retry (the model is
// told what was wrong and may call again), or with Fail (the call failed;
// the model sees the message). Any other error is taken as a failure of the
// worker's surroundings, not of the tool (a database down): the call is
// handed back and delivered again with back-off, up to Config.MaxDeliver
// deliveries, after which the orchestrator fails it. A call whose deadline
// passes while its handler runs fails with "timed out".
//
// # Middleware
//
// Use wraps every handler, outermost first, like net/http middleware:
// Tracing makes a span per call (child of the orchestrator's trace, which
// the call's headers carry) on the provider it is given. Metrics are not a middleware but
// Config.Metrics, since the worker, not a handler, sees every call's
// outcome (expired before it ran, handed back by a drain, a reply that
// could not be published).
//
// # What this package is
//
// It is the engine every toolgate worker runs, tool-worker's exec
// commands, webhooks and MCP servers included: those run as Handlers from
// packages of their own that only the tool-worker binary links. The
// delivery rules (ack after publish, redelivery with back-off, drain,
// consumer creation through a cluster's elections, cancel notices,
// advertisements) are written once here. The package links the NATS
// client, msgpack, the OpenTelemetry trace API (no SDK, no exporter) and
// the schema reflector of typed tools, and neither nats-server nor the
// Prometheus client: Config.Metrics and Config.TracerProvider take what a
// main wires (see package prommetrics).
package worker
