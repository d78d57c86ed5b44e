package bus

// The conversation log is the orchestrator's own storage, not part of the
// wire contract: no worker or approver reads it, so it is named here and
// not in package wire.
const (
	// StreamConversations holds each conversation's log: one subject per
	// conversation (ConversationSubject), each message a record of what
	// one change of the conversation changed.
	StreamConversations = "TOOLGATE_CONVERSATIONS"
	// BucketIndex indexes the conversations: due.<id> while one is not
	// finished (what the orchestrator's reconcile goes over), from when it
	// has lasted a few seconds; and the cursors of the retention sweeps
	// (sweep.finished, sweep.tombstones), the sequence of the
	// conversations' stream each went on to.
	BucketIndex = "toolgate_index"
	// BucketReplicas holds each orchestrator replica's advert: which
	// agents it runs, with the digest of each one's config, until when,
	// and the watermark below the conversations it has not indexed (key:
	// the replica's instance id).
	BucketReplicas = "toolgate_replicas"

	subjectConv = "toolgate.conv"
)

// ConversationSubject is the subject of conversation id's log.
func ConversationSubject(id string) string { return subjectConv + "." + id }

// ConversationSubjects matches every conversation's log.
const ConversationSubjects = subjectConv + ".>"
