// Package bus is toolgate's NATS JetStream layer: an embedded server or a
// connection to a cluster, the streams, consumers and KV buckets toolgate
// needs, the wire codecs (msgpack by default, JSON on request), publishing
// with de-duplication ids, typed pull consumers with explicit
// ack/nak/term, and dead letters. It knows the wire messages but no agent
// logic.
//
// Streams and subjects:
//
//	TOOLGATE_CALLS      toolgate.call.<tool>                 work queue, one durable call_<tool> per tool
//	TOOLGATE_APPROVALS  toolgate.approval.<tool>             limits + age, one durable per approver (fan-out)
//	TOOLGATE_REPLIES    toolgate.reply.<run>.call|approval   limits + age, one durable shared by orchestrators
//	TOOLGATE_EVENTS     toolgate.event.<conversation>        limits + age
//	TOOLGATE_DLQ        toolgate.dlq.<reason>                messages that could not be handled
//	TOOLGATE_AUDIT      toolgate.audit.<run>                 decisions, kept for audit
//	TOOLGATE_ADVISORIES $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.*
//
// Results and decisions use different reply subjects so that NATS
// permissions can keep workers from publishing decisions and approvers
// from publishing results (see RolePermissions).
//
// Every consumed message ends explicitly: a handler that returns nil acks,
// one that returns an error naks with the consumer's back-off delay, a
// TermError or an undecodable message goes to the dead-letter stream and is
// terminated, a panic is recovered into a nak.
package bus
