package bus

import "fmt"

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
// stream, for the inbox), and dead-letter what they cannot decode. The orchestrator may do anything toolgate does.
func RolePermissions(role string) (Permissions, error) {
	inbox := []string{"_INBOX.>"}
	switch role {
	case RoleOrchestrator:
		return Permissions{
			Publish:   []string{"toolgate.>", "$JS.API.>", "$JS.ACK.>", "$KV.>"},
			Subscribe: inbox,
		}, nil
	case RoleWorker:
		return Permissions{
			Publish: append(consumerAPI(StreamCalls),
				subjectReply+".*."+ReplyKindCall,
				subjectDLQ+".>",
				"$KV."+BucketTools+".>",
				"$JS.API.STREAM.INFO.KV_"+BucketTools,
				"$JS.API.INFO",
			),
			Subscribe: inbox,
		}, nil
	case RoleApprover:
		return Permissions{
			// The approval inbox also reads the conversations' events (to
			// learn what was settled elsewhere and to show transcripts), and
			// its scans of both streams use ordered consumers it deletes.
			Publish: append(append(consumerAPI(StreamApprovals), consumerAPI(StreamEvents)...),
				"$JS.API.CONSUMER.DELETE."+StreamApprovals+".>",
				"$JS.API.CONSUMER.DELETE."+StreamEvents+".>",
				subjectReply+".*."+ReplyKindApproval,
				subjectDLQ+".>",
			),
			Subscribe: inbox,
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
