// Package worker runs tool-worker's executors (an exec command, an HTTP
// webhook, an MCP server, the built-in tools; each in a package of its own)
// on the public worker engine (package github.com/toolgate/toolgate/worker),
// on a bus the module configured: the tool-worker binary, the tests and the
// bench tools use it. The engine pulls external calls from the
// TOOLGATE_CALLS stream, runs each through its Executor and publishes the
// CallReply on toolgate.reply.<run_id>.call.
//
// A call is acknowledged only after its reply is published, so a worker that
// dies leaves the call to redelivery. Long calls send in-progress acks every
// AckWait/3. An executor error (as opposed to a reply with outcome failed) is
// an infrastructure failure: the call is released with a delay and retried,
// by this worker or another one serving the same tool.
package worker
