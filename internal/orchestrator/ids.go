package orchestrator

import "strings"

// A run id names its conversation: "r" + its own part + runIDSep + the
// conversation id. A reply thus finds its conversation without a read, and
// a run needs no index entry.
const runIDSep = "_"

func runIDFor(part, convID string) string { return "r" + part + runIDSep + convID }

// convOfRunID is the conversation a run id names, or "" for an id of
// another form.
func convOfRunID(runID string) string {
	part, conv, ok := strings.Cut(strings.TrimPrefix(runID, "r"), runIDSep)
	if !ok || !strings.HasPrefix(runID, "r") || !alnum(part) || len(conv) < 2 || conv[0] != 'c' || !alnum(conv) {
		return ""
	}
	return conv
}

func alnum(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// ValidID reports whether s can be a conversation or run id: it must fit a
// subject token and a KV key.
func ValidID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
