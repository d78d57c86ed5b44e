// Package bus is toolgate's NATS JetStream transport: a connection to a
// server or cluster, the streams, consumers and KV buckets toolgate needs,
// publishing with de-duplication ids, typed pull consumers with explicit
// ack/nak/term, and dead letters. The messages it carries, their subjects,
// codecs and validation are package wire's; the embedded server is package embedded's, so that programs
// that only connect do not link nats-server. It holds no agent logic.
//
// Streams and subjects: see package wire. Besides them, bus sets up
//
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
