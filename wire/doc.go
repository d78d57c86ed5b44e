// Package wire is toolgate's wire contract: the messages tool workers,
// approvers and the orchestrator exchange over NATS JetStream, their
// subjects, stream and consumer names, message ids, headers, codecs
// (msgpack by default, JSON on request), validation, the canonical JSON
// and ed25519 signatures of decisions, the conversation events with their
// typed payloads, and the audit record.
//
// It holds no connection and no server: a program that speaks toolgate's
// protocol (a worker, an approval bot, a bridge to another system) imports
// wire without linking nats-server, and may use any NATS client. The JSON
// Schemas under schemas/ describe the same messages for other languages.
//
// Streams and subjects:
//
//	TOOLGATE_CALLS      toolgate.call.<tool>                 work queue, one durable call_<tool> per tool
//	TOOLGATE_APPROVALS  toolgate.approval.<tool>             limits + age, one durable per approver (fan-out)
//	TOOLGATE_REPLIES    toolgate.reply.<run>.call|approval   limits + age, stored by partition of the run, one durable per partition
//	TOOLGATE_EVENTS     toolgate.event.<conversation>        limits + age
//	TOOLGATE_DLQ        toolgate.dlq.<reason>                messages that could not be handled
//	TOOLGATE_AUDIT      toolgate.audit.<run>                 decisions, kept for audit
//
// Results and decisions use different reply subjects so that NATS
// permissions can keep workers from publishing decisions and approvers
// from publishing results.
//
// # Why the contract moved here
//
// These definitions used to live in internal/bus, beside the JetStream
// transport and the embedded server, so every worker and approver binary
// linked nats-server, and nothing outside the repository could name a
// message. They were moved, not wrapped: a wrapper would be a second set
// of types to keep in step with the first, and the contract has exactly
// one definition by nature. Every package, the transport included, names
// it as wire.
//
// # Stability
//
// toolgate is at v0: the wire format itself is stable within a major
// protocol (fields are only added, and receivers ignore fields they do not
// know), while the Go API of this package may still change between minor
// versions, each change named in the release notes.
package wire
