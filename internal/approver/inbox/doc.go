// Package inbox is the approval inbox: a web page, served by the approver
// process, where humans see pending approval requests live and approve,
// deny or edit them.
//
// The inbox keeps its own durable consumer on TOOLGATE_APPROVALS (every
// approver sees every request; bus.ConsumeApprovals, which dead-letters a
// request that does not decode or is invalid) and holds each request it
// shows unacked (bus.Delivery.Hold: the bus renews it with in-progress
// acks), until it is decided here, expires, or is settled elsewhere. The unacked set on the server is then the set of
// open requests: an inbox that restarts gets them all again (at once after
// a clean stop, which naks them; after AckWait after a crash), and nothing
// is kept on disk here.
//
// Settled elsewhere means: the conversation events on TOOLGATE_EVENTS
// (replayed from the start of the stream, then followed) show a reply
// applied to the call, the run's calls expired, or a later run of the
// conversation started; or, when an orchestrator's API is configured, its
// GET /v1/pending no longer lists the call. Run together with a policy
// bot, the inbox thus shows a request until the bot's decision (or anyone
// else's) has been applied.
//
// Decisions are published as the bot's are: wire.Decision with the
// request's args_digest, the approver's id, decided_at, signed with the
// approver's key when it has one. Edited args are checked against the
// tool's schema (ApprovalRequest.Parameters) before anything is sent.
package inbox
