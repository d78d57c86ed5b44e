package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/schemas"
)

// The conversation view, with a history holding every kind of part, is what
// schemas/conversation.schema.json says.
func TestConversationViewMatchesItsSchema(t *testing.T) {
	t.Parallel()
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	history := []agent.Message{
		{Kind: agent.KindRequest, Parts: []agent.Part{
			{Kind: agent.PartSystemPrompt, Content: "You edit files."},
			{Kind: agent.PartUserPrompt, Content: "Tidy up"},
		}},
		{Kind: agent.KindResponse, RunID: "r1_c1", Parts: []agent.Part{
			{Kind: agent.PartText, Content: "On it."},
			{Kind: agent.PartToolCall, ToolName: "update_file", ToolCallID: "a", Args: raw(`{"path":"x"}`)},
			{Kind: agent.PartToolCall, ToolName: "delete_file", ToolCallID: "b", Args: raw(`not json`)},
		}},
		{Kind: agent.KindRequest, Parts: []agent.Part{
			{Kind: agent.PartToolReturn, ToolName: "update_file", ToolCallID: "a", Value: raw(`{"n":1.0}`), Metadata: raw(`{"k":1}`)},
			{Kind: agent.PartToolReturn, ToolName: "delete_file", ToolCallID: "b", Content: "denied", Outcome: agent.OutcomeDenied},
			{Kind: agent.PartToolReturn, ToolName: "delete_file", ToolCallID: "c", Content: "boom", Outcome: agent.OutcomeFailed},
			{Kind: agent.PartRetryPrompt, ToolName: "update_file", ToolCallID: "d", Content: "path: required"},
			{Kind: agent.PartRetryPrompt, Content: "answer with a tool"},
		}},
		{Kind: agent.KindResponse},
	}
	out := "done"
	v := ConversationView{
		ConversationID: "c1", Status: conversation.StatusCompleted, Output: &out,
		Runs:    []RunSummary{{RunID: "r1_c1", Status: conversation.StatusCompleted}},
		Pending: []PendingView{{ToolCallID: "e", ToolName: "t", Kind: "approval", Args: raw(`{}`), Deadline: time.Now()}},
		Decisions: []conversation.DecisionRecord{
			{RunID: "r1_c1", ToolCallID: "b", ToolName: "delete_file", ApproverID: "bot", At: time.Now()},
			{RunID: "r1_c1", ToolCallID: "a", ToolName: "update_file", Approved: true, OverrideArgs: raw(`{"path":"y"}`), ApproverID: "bot", At: time.Now()},
		},
		QueuedPrompt: &QueuedPrompt{RunID: "r2_c1", Prompt: "and then?"},
	}
	v.Messages = messagesJSON(history, v.Decisions)
	doc, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := schemas.Validate("conversation", doc); err != nil {
		t.Errorf("%s: %v", doc, err)
	}
	if len(v.Messages) != len(history) {
		t.Fatalf("%d messages, want %d", len(v.Messages), len(history))
	}
	// The call approved with edited args shows them, and the model's.
	var resp struct{ Response []partJSON }
	if err := json.Unmarshal(v.Messages[1], &resp); err != nil || len(resp.Response) != 3 {
		t.Fatalf("response %s: %v", v.Messages[1], err)
	}
	if c := resp.Response[1].Call; c == nil || string(c.Args) != `{"path":"y"}` || string(c.OriginalArgs) != `{"path":"x"}` {
		t.Errorf("the edited call reads %s, want args {\"path\":\"y\"} and original_args {\"path\":\"x\"}", v.Messages[1])
	}
	if c := resp.Response[2].Call; c == nil || c.OriginalArgs != nil {
		t.Errorf("a call approved as made reads %s, want no original_args", v.Messages[1])
	}
}
