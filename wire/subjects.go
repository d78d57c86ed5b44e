package wire

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/deferred"
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
)

// KV bucket names.
const (
	BucketTools = "toolgate_tools"
)

// Subject prefixes; each stream captures <prefix>.>.
const (
	PrefixCall     = "toolgate.call"
	PrefixApproval = "toolgate.approval"
	PrefixReply    = "toolgate.reply"
	PrefixEvent    = "toolgate.event"
	PrefixDLQ      = "toolgate.dlq"
	PrefixAudit    = "toolgate.audit"
)

// Notices are core NATS messages (not stored) that tell processes to look
// at something now rather than at their next scan; losing one delays work
// but loses nothing, since what they announce is stored.
const (
	// PrefixCancel.<run>: the run's conversation was cancelled, so its
	// calls in flight may stop. Workers subscribe to AllCancels.
	PrefixCancel = "toolgate.cancel"
	// PrefixNudge.<agent>: a conversation of that agent (the body is its
	// id) has work a replica running the agent should take up now.
	PrefixNudge = "toolgate.nudge"
)

// AllCancels is the filter for every run's cancel notice.
const AllCancels = PrefixCancel + ".*"

// CancelSubject is toolgate.cancel.<run>.
func CancelSubject(runID string) (string, error) { return subject("run id", PrefixCancel, runID) }

// NudgeSubject is toolgate.nudge.<agent>.
func NudgeSubject(agent string) (string, error) { return subject("agent name", PrefixNudge, agent) }

// Reply kinds: the last token of a reply subject, the kind of the
// deferred call answered.
const (
	ReplyKindCall     = string(deferred.KindCall)
	ReplyKindApproval = string(deferred.KindApproval)
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
	if plainToken(s) {
		return nil
	}
	return checkTokenRunes(what, s)
}

// checkTokenRunes is ValidateToken's check of each rune of s.
func checkTokenRunes(what, s string) error {
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

// tokenByte says which ASCII bytes a token may hold without a closer look:
// every id a call carries is checked on each message, and most are ASCII.
var tokenByte = func() (t [utf8.RuneSelf]bool) {
	for c := '!'; c < utf8.RuneSelf-1; c++ {
		t[c] = !strings.ContainsRune(".*>/\\", c)
	}
	return t
}()

// plainToken reports whether s is all ASCII a token may hold; false sends
// it to ValidateToken's rune by rune check, which says what is wrong.
func plainToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || !tokenByte[c] {
			return false
		}
	}
	return true
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
func CallSubject(tool string) (string, error) { return subject("tool name", PrefixCall, tool) }

// ApprovalSubject is toolgate.approval.<tool>.
func ApprovalSubject(tool string) (string, error) {
	return subject("tool name", PrefixApproval, tool)
}

// CallReplySubject is toolgate.reply.<run>.call, where workers publish results.
func CallReplySubject(runID string) (string, error) {
	s, err := subject("run id", PrefixReply, runID)
	if err != nil {
		return "", err
	}
	return s + "." + ReplyKindCall, nil
}

// DecisionSubject is toolgate.reply.<run>.approval, where approvers publish
// decisions.
func DecisionSubject(runID string) (string, error) {
	s, err := subject("run id", PrefixReply, runID)
	if err != nil {
		return "", err
	}
	return s + "." + ReplyKindApproval, nil
}

// EventSubject is toolgate.event.<conversation>.
func EventSubject(conversationID string) (string, error) {
	return subject("conversation id", PrefixEvent, conversationID)
}

// Dead-letter kinds: the last token of toolgate.dlq.<kind>.
const (
	DLQDecode        = "decode"         // the body could not be decoded
	DLQInvalid       = "invalid"        // decoded, but a field is wrong
	DLQHandler       = "handler"        // the handler gave up on it (it refused the message for good)
	DLQMaxDeliveries = "max_deliveries" // delivered MaxDeliver times without an ack
)

// DLQSubject is toolgate.dlq.<kind>, kind being a short reason class such
// as "decode", "invalid", "max_deliveries" or "handler".
func DLQSubject(kind string) (string, error) { return subject("dead-letter kind", PrefixDLQ, kind) }

// AuditSubject is toolgate.audit.<run>.
func AuditSubject(runID string) (string, error) { return subject("run id", PrefixAudit, runID) }

// AllEvents is the filter for every conversation's events.
const AllEvents = PrefixEvent + ".>"

// AllApprovals is the filter for every tool's approval requests.
const AllApprovals = PrefixApproval + ".>"

// AllReplies is the filter for every run's results and decisions.
const AllReplies = PrefixReply + ".>"

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
	if len(parts) != 4 || parts[0]+"."+parts[1] != PrefixReply {
		return "", "", fmt.Errorf("not a reply subject: %q", s)
	}
	if parts[3] != ReplyKindCall && parts[3] != ReplyKindApproval {
		return "", "", fmt.Errorf("reply subject %q: unknown kind %q", s, parts[3])
	}
	return parts[2], parts[3], nil
}
