package orchestrator

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
)

// A run id names its conversation; ids of other forms (runs stored before,
// forged ones) name none and are looked up in the run index.
func TestRunIDNamesConversation(t *testing.T) {
	cases := map[string]string{
		runIDFor("0a1b", "c9f8e"):      "c9f8e",
		"r0a1b_c9f8e":                  "c9f8e",
		"r4b6962a01a96c113cce3e010":    "",
		"r0a1b_":                       "",
		"r_c9f8e":                      "",
		"r0a1b_x9f8e":                  "",
		"r0a1b_c":                      "",
		"x0a1b_c9f8e":                  "",
		"r0a1b_c9f8e_c1":               "",
		"r0a-1b_c9f8e":                 "",
		"r0a1b_c9.f8e":                 "",
		"r" + strings.Repeat("a", 300): "",
	}
	for id, want := range cases {
		if got := convOfRunID(id); got != want {
			t.Errorf("convOfRunID(%q) = %q, want %q", id, got, want)
		}
	}
}

// Ids must join cleanly: a NewID that makes anything but letters and digits
// is refused at New.
func TestNewRefusesIDsThatDoNotJoin(t *testing.T) {
	for _, id := range []string{"a_b", "a-b", "a.b", ""} {
		cfg := Config{Bus: &bus.Bus{}, Agent: &AgentConfig{}, NewID: func() string { return id }}.withDefaults()
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "letters and digits") {
			t.Errorf("NewID making %q: %v", id, err)
		}
	}
	cfg := Config{Bus: &bus.Bus{}, Agent: &AgentConfig{}}.withDefaults()
	if err := cfg.validate(); err != nil {
		t.Errorf("default ids: %v", err)
	}
}

// A reply group completes its batch when it answers every call still
// pending; replies to another run cannot be judged and end the wait.
func TestReplyGroupCompletesBatch(t *testing.T) {
	b := &conversation.Batch{RunID: "r1", Calls: []*conversation.PendingCall{
		{ToolCallID: "a"}, {ToolCallID: "b", Reply: &conversation.Reply{}}, {ToolCallID: "c"},
	}}
	job := func(run, call string) *replyJob { return &replyJob{in: incoming{runID: run, callID: call}} }
	cases := []struct {
		jobs []*replyJob
		want bool
	}{
		{[]*replyJob{job("r1", "a")}, false},
		{[]*replyJob{job("r1", "a"), job("r1", "a")}, false},
		{[]*replyJob{job("r1", "a"), job("r1", "b")}, false},
		{[]*replyJob{job("r1", "a"), job("r1", "c")}, true},
		{[]*replyJob{job("r1", "a"), job("r1", "zz")}, false},
		{[]*replyJob{job("r0", "a")}, true},
	}
	for i, c := range cases {
		if got := completes(b, c.jobs); got != c.want {
			t.Errorf("case %d: completes = %v, want %v", i, got, c.want)
		}
	}
}
