package orchestrator

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/agent"
)

// reflectedConversation is Conversation without its EncodeMsgpack: encoded
// by reflection.
type reflectedConversation Conversation

// Conversation's own encoding is reflection's, byte for byte, for every
// optional field set or not, sorted or not, alone and behind a pointer.
func TestConversationMsgpackAsReflection(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)
	sets := []func(*Conversation){
		func(c *Conversation) {
			c.Batch = &Batch{RunID: "r1", Calls: []*PendingCall{{ToolCallID: "call_1", ToolName: "noop", Args: json.RawMessage(`{}`)}}}
		},
		func(c *Conversation) { c.Output = "done" },
		func(c *Conversation) { c.Error = "failed" },
		func(c *Conversation) { c.Lease = &Lease{} },
		func(c *Conversation) { c.StaleReplies = 70000 },
		func(c *Conversation) { c.Decisions = []DecisionRecord{{RunID: "r1", Approved: true, At: at}} },
		func(c *Conversation) { c.Agent = "default" },
		func(c *Conversation) { c.AgentDigest = "abc" },
		func(c *Conversation) { c.Caller = json.RawMessage(`{"user":"ann"}`) },
		func(c *Conversation) { c.Unserved = "no replica" },
		func(c *Conversation) { c.UnservedSince = at },
		func(c *Conversation) {
			c.History = []agent.Message{{Kind: agent.KindRequest, Parts: []agent.Part{{Kind: agent.PartUserPrompt, Content: "hi"}}, Timestamp: at}}
			c.Runs = []*RunRecord{{RunID: "r1", Status: StatusPaused, StartedAt: at}}
		},
		func(c *Conversation) { c.StaleReplies = 3; c.Decisions = []DecisionRecord{} },
	}
	for i := range 1 << len(sets) {
		c := Conversation{ID: "c1", Status: StatusPaused, CreatedAt: at, UpdatedAt: at.Add(time.Second)}
		for bit, set := range sets {
			if i&(1<<bit) != 0 {
				set(&c)
			}
		}
		for _, sorted := range []bool{false, true} {
			for _, compact := range []bool{false, true} {
				for _, v := range [][2]any{{c, reflectedConversation(c)}, {&c, (*reflectedConversation)(&c)}} {
					got, want := encodeAs(t, sorted, compact, v[0]), encodeAs(t, sorted, compact, v[1])
					if !bytes.Equal(got, want) {
						t.Fatalf("%+v (sorted %v, compact %v) encodes as\n%x\nreflection gives\n%x", c, sorted, compact, got, want)
					}
				}
			}
		}
	}
}

func encodeAs(t *testing.T, sorted, compact bool, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(sorted)
	enc.UseCompactInts(compact)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Every stored field of Conversation is written by its EncodeMsgpack when
// set: a field added to the struct and not to the method fails here.
func TestConversationMsgpackWritesEveryField(t *testing.T) {
	t.Parallel()
	at := time.Now()
	c := Conversation{ID: "c", Status: StatusPaused, History: []agent.Message{{}}, Runs: []*RunRecord{{}}, Batch: &Batch{}, Output: "o",
		Error: "e", Lease: &Lease{}, StaleReplies: 1, Decisions: []DecisionRecord{{}}, Agent: "a", AgentDigest: "d",
		Caller: json.RawMessage(`1`), Unserved: "u", UnservedSince: at, CreatedAt: at, UpdatedAt: at}
	checkEveryField(t, reflect.TypeFor[Conversation](), encodeAs(t, false, false, c))
}

// checkEveryField fails unless the msgpack map enc holds every field of
// struct type typ that has a msgpack name.
func checkEveryField(t *testing.T, typ reflect.Type, enc []byte) {
	t.Helper()
	var m map[string]msgpack.RawMessage
	if err := msgpack.Unmarshal(enc, &m); err != nil {
		t.Fatal(err)
	}
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if _, ok := m[name]; !ok {
			t.Errorf("%s.%s (%q) set is not written by its EncodeMsgpack", typ.Name(), f.Name, name)
		}
	}
}
