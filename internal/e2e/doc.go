// Package e2e holds toolgate's multi-process fault tests: the orchestrator
// and tool-worker binaries are built once, started as real processes on a
// NATS server, and killed (SIGKILL), frozen (SIGSTOP) and restarted at chosen
// moments; the tests then check over HTTP, KV and the streams that nothing
// was lost and nothing was applied twice (D35, D37).
package e2e
