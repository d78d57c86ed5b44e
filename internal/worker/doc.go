// Package worker is the tool-worker: it pulls external calls from the
// TOOLGATE_CALLS stream, runs each through an Executor (an exec command, an
// HTTP webhook or a built-in Go tool) and publishes the CallReply on
// toolgate.reply.<run_id>.call.
//
// A call is acknowledged only after its reply is published, so a worker that
// dies leaves the call to redelivery. Long calls send in-progress acks every
// AckWait/3. An executor error (as opposed to a reply with outcome failed) is
// an infrastructure failure: the call is released with a delay and retried,
// by this worker or another one serving the same tool.
package worker
