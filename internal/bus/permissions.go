package bus

import (
	"fmt"

	"github.com/toolgate/toolgate/wire"
)

// InboxPrefix is the prefix of the reply subjects (inboxes) of a role's
// clients. A worker's or an approver's user may subscribe only under its
// role's prefix: with NATS's shared default (_INBOX) it could subscribe to
// _INBOX.> and receive every other client's replies, among them the KV
// values the orchestrator reads (prompts, history, args, results). The
// orchestrator keeps the default. Set ConnConfig.Role to use it.
func InboxPrefix(role string) string {
	switch role {
	case RoleWorker, RoleApprover:
		return "_INBOX_" + role
	}
	return "_INBOX"
}

// Roles of toolgate processes, for RolePermissions.
const (
	RoleOrchestrator = "orchestrator"
	RoleWorker       = "worker"
	RoleApprover     = "approver"
)

// RolePermissions are the subject permissions of a role: workers may
// publish results (toolgate.reply.*.call) but not decisions, approvers
// decisions (toolgate.reply.*.approval) but not results; both may use only
// their own stream's consumers and acks (approvers also read the events
// stream, for the inbox), and dead-letter what they cannot decode. Each
// role receives replies only under its own InboxPrefix. The orchestrator
// may do anything toolgate does.
func RolePermissions(role string) (Permissions, error) {
	inbox := []string{InboxPrefix(role) + ".>"}
	switch role {
	case RoleOrchestrator:
		return Permissions{
			// It answers approvers' status requests in their inboxes.
			Publish: []string{"toolgate.>", "$JS.API.>", "$JS.ACK.>", "$KV.>", InboxPrefix(RoleApprover) + ".>"},
			// Cancel notices stop its runs of cancelled conversations;
			// nudges hand it conversations of its agents; approvers ask
			// what is still pending.
			Subscribe: append(inbox, AllCancels, subjectNudge+".*", wire.SubjectApprovalStatus),
		}, nil
	case RoleWorker:
		return Permissions{
			// Workers bind to call_<tool>, which the orchestrator makes;
			// they may neither make nor update it (one API subject does
			// both), so no worker can change the durable all share.
			Publish: append(consumerBindAPI(wire.StreamCalls),
				wire.PrefixReply+".*."+wire.ReplyKindCall,
				wire.PrefixDLQ+".>",
				// Looking a call up before running it: one the
				// orchestrator withdrew is gone (CallQueued), asked
				// with a direct get, then of the stream's leader.
				"$JS.API.STREAM.MSG.GET."+wire.StreamCalls,
				"$JS.API.DIRECT.GET."+wire.StreamCalls,
				"$KV."+wire.BucketTools+".>",
				"$JS.API.STREAM.INFO.KV_"+wire.BucketTools,
				// Reading an advert (KeyValue.Get): without it a worker's
				// Get gets no answer and waits for its deadline.
				"$JS.API.DIRECT.GET.KV_"+wire.BucketTools+".>",
				"$JS.API.INFO",
			),
			// Cancel notices stop calls of cancelled conversations.
			Subscribe: append(inbox, AllCancels),
		}, nil
	case RoleApprover:
		return Permissions{
			// The approval inbox also reads the conversations' events (to
			// learn what was settled elsewhere and to show transcripts)
			// through ordered consumers it deletes when done. Approvers may
			// not delete consumers of the approvals stream: NATS cannot tell
			// an approver's own consumer from another's there, and a deleted
			// durable stops a bot until it makes it again. Their scans of
			// that stream expire by themselves instead. Nor may an
			// approver user make or update the durables of another
			// (ApproverDeny, which the users file adds).
			Publish: append(append(consumerAPI(wire.StreamApprovals), consumerAPI(wire.StreamEvents)...),
				"$JS.API.CONSUMER.DELETE."+wire.StreamEvents+".>",
				// The nameless create, which both JavaScript clients
				// (nats, @nats-io/jetstream) send for a consumer with a
				// list of filters, an ordered one among them: the name
				// is in the body then. On the events stream an approver
				// may make any consumer anyway. Not on the approvals
				// stream: a name in the body would get past
				// ApproverDeny, which matches names in the subject.
				"$JS.API.CONSUMER.CREATE."+wire.StreamEvents,
				wire.PrefixReply+".*."+wire.ReplyKindApproval,
				wire.PrefixDLQ+".>",
				// Reading a tool's advert, which says what MCP server it
				// comes from.
				"$JS.API.STREAM.INFO.KV_"+wire.BucketTools,
				"$JS.API.DIRECT.GET.KV_"+wire.BucketTools+".>",
				// Standing decisions: approvers give (and revoke) them
				// under bus.<id> only; api.<id> is the orchestrator's,
				// for the grants its API's callers give.
				"$KV."+wire.BucketGrants+"."+wire.GrantKeyBus+".>",
				"$JS.API.STREAM.INFO.KV_"+wire.BucketGrants,
				"$JS.API.DIRECT.GET.KV_"+wire.BucketGrants+".>",
				// Account info, which clients such as nats.js probe
				// before their first JetStream call.
				"$JS.API.INFO",
				// Asking the orchestrator what is still pending.
				wire.SubjectApprovalStatus,
			),
			// The outcomes of decisions.
			Subscribe: append(inbox, wire.AllOutcomes),
		}, nil
	}
	return Permissions{}, fmt.Errorf("unknown role %q", role)
}

// consumerAPI is what a client needs to create, look up and pull from
// durable consumers of one stream and to ack their messages.
func consumerAPI(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.CONSUMER.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.DURABLE.CREATE." + stream + ".>",
		"$JS.API.CONSUMER.INFO." + stream + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".>",
		"$JS.ACK." + stream + ".>",
	}
}

// consumerBindAPI is consumerAPI without making or updating consumers.
func consumerBindAPI(stream string) []string {
	return []string{
		"$JS.API.STREAM.INFO." + stream,
		"$JS.API.CONSUMER.INFO." + stream + ".>",
		"$JS.API.CONSUMER.MSG.NEXT." + stream + ".>",
		"$JS.ACK." + stream + ".>",
	}
}

// ApproverConsumers are the durables of TOOLGATE_APPROVALS that an approver
// user owns unless the users file lists its own: one named as the user (a
// bot run with --id NAME) and NAME-inbox (the inbox of that id).
func ApproverConsumers(user string) []string { return []string{user, user + "-inbox"} }

// ApproverDeny are the API subjects that make or update the given durables
// of TOOLGATE_APPROVALS (the same subject does both), denied to every
// approver user but their owner: one approver could otherwise edit
// another's filter and silence it, and what was published meanwhile would
// be skipped for good.
func ApproverDeny(consumers []string) []string {
	var out []string
	for _, c := range consumers {
		out = append(out,
			"$JS.API.CONSUMER.CREATE."+wire.StreamApprovals+"."+c,
			"$JS.API.CONSUMER.CREATE."+wire.StreamApprovals+"."+c+".>",
			"$JS.API.CONSUMER.DURABLE.CREATE."+wire.StreamApprovals+"."+c,
		)
	}
	return out
}
