// Package e2e holds toolgate's whole-system tests. Fault tests build the
// orchestrator and tool-worker binaries once, start them as real processes on
// a NATS server, and kill (SIGKILL), freeze (SIGSTOP) and restart them at
// chosen moments; the tests then check over HTTP, KV and the streams that
// nothing was lost and nothing was applied twice (D35, D37). Cluster tests run
// on three NATS nodes; the inbox browser test drives a real conversation
// through the approval inbox in headless Chromium.
package e2e
