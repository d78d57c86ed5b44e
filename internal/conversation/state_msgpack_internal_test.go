package conversation

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/msgpackmap/msgpackmaptest"
)

// reflectedConversation is State without its EncodeMsgpack: encoded
// by reflection.
type reflectedConversation State

// State's own encoding is reflection's, byte for byte, for every
// optional field set or not, alone and behind a pointer.
func TestConversationMsgpackAsReflection(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)
	sets := []func(*State){
		func(c *State) {
			c.Batch = &Batch{RunID: "r1", Calls: []*PendingCall{{ToolCallID: "call_1", ToolName: "noop", Args: json.RawMessage(`{}`)}}}
		},
		func(c *State) { c.Output = "done" },
		func(c *State) { c.Error = "failed" },
		func(c *State) { c.Lease = &Lease{} },
		func(c *State) { c.StaleReplies = 70000 },
		func(c *State) { c.Decisions = []DecisionRecord{{RunID: "r1", Approved: true, At: at}} },
		func(c *State) { c.Agent = "default" },
		func(c *State) { c.AgentDigest = "abc" },
		func(c *State) { c.Caller = json.RawMessage(`{"user":"ann"}`) },
		func(c *State) { c.Unserved = "no replica" },
		func(c *State) { c.UnservedSince = at },
		func(c *State) {
			c.History = []agent.Message{{Kind: agent.KindRequest, Parts: []agent.Part{{Kind: agent.PartUserPrompt, Content: "hi"}}, Timestamp: at}}
			c.Runs = []*RunRecord{{RunID: "r1", Status: StatusPaused, StartedAt: at}}
			// The one optional field with the fields always written: no
			// other optional field's count stands in for it.
			c.FrontendTools = []agent.ToolDef{{Name: "page_color", Parameters: json.RawMessage(`{"type":"object"}`)}}
		},
		func(c *State) { c.StaleReplies = 3; c.Decisions = []DecisionRecord{} },
	}
	for i := range 1 << len(sets) {
		c := State{ID: "c1", Status: StatusPaused, CreatedAt: at, UpdatedAt: at.Add(time.Second)}
		for bit, set := range sets {
			if i&(1<<bit) != 0 {
				set(&c)
			}
		}
		msgpackmaptest.Same(t, c, reflectedConversation(c))
		msgpackmaptest.Same(t, &c, (*reflectedConversation)(&c))
	}
}

// Every stored field of State is written by its EncodeMsgpack when
// set.
func TestConversationMsgpackWritesEveryField(t *testing.T) {
	t.Parallel()
	at := time.Now()
	c := State{ID: "c", Status: StatusPaused, History: []agent.Message{{}}, Runs: []*RunRecord{{}}, Batch: &Batch{}, Output: "o",
		Error: "e", Lease: &Lease{}, StaleReplies: 1, Decisions: []DecisionRecord{{}}, Agent: "a", AgentDigest: "d",
		Caller: json.RawMessage(`1`), FrontendTools: []agent.ToolDef{{}}, Signed: true, Unserved: "u", UnservedSince: at, CreatedAt: at, UpdatedAt: at}
	msgpackmaptest.EveryField(t, reflect.TypeFor[State](), msgpackmaptest.Encode(t, c, false, false))
}
