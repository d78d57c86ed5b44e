package bus

import (
	"fmt"
	"strings"
	"unicode"
)

// Stream names.
const (
	StreamCalls      = "TOOLGATE_CALLS"
	StreamApprovals  = "TOOLGATE_APPROVALS"
	StreamReplies    = "TOOLGATE_REPLIES"
	StreamEvents     = "TOOLGATE_EVENTS"
	StreamDLQ        = "TOOLGATE_DLQ"
	StreamAudit      = "TOOLGATE_AUDIT"
	StreamAdvisories = "TOOLGATE_ADVISORIES"
	// StreamConversations holds each conversation's log: one subject per
	// conversation (ConversationSubject), each message a record of what
	// one change of the conversation changed.
	StreamConversations = "TOOLGATE_CONVERSATIONS"
)

// KV bucket names.
const (
	BucketRuns  = "toolgate_runs"
	BucketTools = "toolgate_tools"
	// BucketIndex indexes the conversations: due.<id> while one is not
	// finished (what the orchestrator's reconcile goes over).
	BucketIndex = "toolgate_index"
)

// Subject prefixes; each stream captures <prefix>.>.
const (
	subjectCall     = "toolgate.call"
	subjectApproval = "toolgate.approval"
	subjectReply    = "toolgate.reply"
	subjectEvent    = "toolgate.event"
	subjectDLQ      = "toolgate.dlq"
	subjectAudit    = "toolgate.audit"
	subjectConv     = "toolgate.conv"

	// advisoryMaxDeliveries is followed by <stream>.<consumer>.
	advisoryMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
)

// ConversationSubject is the subject of conversation id's log.
func ConversationSubject(id string) string { return subjectConv + "." + id }

// ConversationSubjects matches every conversation's log.
const ConversationSubjects = subjectConv + ".>"

// Reply kinds: the last token of a reply subject.
const (
	ReplyKindCall     = "call"
	ReplyKindApproval = "approval"
)

// ValidateToken reports whether s can stand as one subject token (and as part
// of a consumer name or KV key): non-empty, at most 256 bytes, no dots,
// wildcards, slashes, whitespace or control characters. what names the value
// in the error.
func ValidateToken(what, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > 256 {
		return fmt.Errorf("%s is longer than 256 bytes", what)
	}
	for _, r := range s {
		switch {
		case r == '.':
			return fmt.Errorf("%s %q contains a dot", what, s)
		case r == '*' || r == '>':
			return fmt.Errorf("%s %q contains a wildcard", what, s)
		case r == '/' || r == '\\':
			return fmt.Errorf("%s %q contains a slash", what, s)
		case unicode.IsSpace(r):
			return fmt.Errorf("%s %q contains whitespace", what, s)
		case unicode.IsControl(r) || r == unicode.ReplacementChar:
			return fmt.Errorf("%s %q contains a control or invalid character", what, s)
		}
	}
	return nil
}

func subject(what, prefix string, tokens ...string) (string, error) {
	var b strings.Builder
	b.WriteString(prefix)
	for _, t := range tokens {
		if err := ValidateToken(what, t); err != nil {
			return "", fmt.Errorf("subject: %w", err)
		}
		b.WriteByte('.')
		b.WriteString(t)
	}
	return b.String(), nil
}

// CallSubject is toolgate.call.<tool>.
func CallSubject(tool string) (string, error) { return subject("tool name", subjectCall, tool) }

// ApprovalSubject is toolgate.approval.<tool>.
func ApprovalSubject(tool string) (string, error) {
	return subject("tool name", subjectApproval, tool)
}

// CallReplySubject is toolgate.reply.<run>.call, where workers publish results.
func CallReplySubject(runID string) (string, error) {
	s, err := subject("run id", subjectReply, runID)
	if err != nil {
		return "", err
	}
	return s + "." + ReplyKindCall, nil
}

// DecisionSubject is toolgate.reply.<run>.approval, where approvers publish
// decisions.
func DecisionSubject(runID string) (string, error) {
	s, err := subject("run id", subjectReply, runID)
	if err != nil {
		return "", err
	}
	return s + "." + ReplyKindApproval, nil
}

// EventSubject is toolgate.event.<conversation>.
func EventSubject(conversationID string) (string, error) {
	return subject("conversation id", subjectEvent, conversationID)
}

// DLQSubject is toolgate.dlq.<kind>, kind being a short reason class such
// as "decode", "invalid", "max_deliveries" or "handler".
func DLQSubject(kind string) (string, error) { return subject("dead-letter kind", subjectDLQ, kind) }

// AuditSubject is toolgate.audit.<run>.
func AuditSubject(runID string) (string, error) { return subject("run id", subjectAudit, runID) }

// AllEvents is the filter for every conversation's events.
const AllEvents = subjectEvent + ".>"

// AllApprovals is the filter for every tool's approval requests.
const AllApprovals = subjectApproval + ".>"

// AllReplies is the filter for every run's results and decisions.
const AllReplies = subjectReply + ".>"

// CallConsumerName is the durable pull consumer shared by every worker of a
// tool: call_<tool>.
func CallConsumerName(tool string) (string, error) {
	if err := ValidateToken("tool name", tool); err != nil {
		return "", err
	}
	return "call_" + tool, nil
}

// ParseReplySubject splits toolgate.reply.<run>.<kind>.
func ParseReplySubject(s string) (runID, kind string, err error) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 || parts[0]+"."+parts[1] != subjectReply {
		return "", "", fmt.Errorf("not a reply subject: %q", s)
	}
	if parts[3] != ReplyKindCall && parts[3] != ReplyKindApproval {
		return "", "", fmt.Errorf("reply subject %q: unknown kind %q", s, parts[3])
	}
	return parts[2], parts[3], nil
}
