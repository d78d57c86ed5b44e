package api

import (
	"encoding/json"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/wire"
)

// ConversationView is the API's view of a conversation
// (schemas/conversation.schema.json).
type ConversationView struct {
	ConversationID string              `json:"conversation_id"`
	Status         conversation.Status `json:"status"`
	// Output is the final output of a completed conversation, null in any
	// other status (the key is always there).
	Output *string `json:"output"`
	Error  string  `json:"error,omitempty"`
	// Agent and AgentDigest say which agent, with which config, the
	// conversation's runs go on with; Unserved (since UnservedSince) why
	// none does now, while no live replica runs its agent.
	Agent         string     `json:"agent,omitempty"`
	AgentDigest   string     `json:"agent_digest,omitempty"`
	Unserved      string     `json:"unserved,omitempty"`
	UnservedSince *time.Time `json:"unserved_since,omitempty"`
	// Caller is what the application said of who gave the latest prompt.
	Caller   json.RawMessage   `json:"caller,omitempty"`
	Runs     []RunSummary      `json:"runs"`
	Pending  []PendingView     `json:"pending"`
	Messages []json.RawMessage `json:"messages"`
	// Decisions lists every applied decision and who made it (D36).
	Decisions []conversation.DecisionRecord `json:"decisions"`
	// QueuedPrompt is the prompt given while the conversation was paused,
	// which its follow-up run sends after the batch's results; absent
	// when there is none.
	QueuedPrompt *QueuedPrompt `json:"queued_prompt,omitempty"`
}

// QueuedPrompt is a prompt waiting for its conversation's batch: the run
// it starts (status queued in GET /v1/runs/{run_id}) and its text.
type QueuedPrompt struct {
	RunID  string `json:"run_id"`
	Prompt string `json:"prompt"`
}

// RunSummary is one run of a conversation.
type RunSummary struct {
	RunID  string              `json:"run_id"`
	Status conversation.Status `json:"status"`
}

// PendingView is a deferred call still waiting for its reply (package wire).
type PendingView = wire.PendingCall

func viewOf(c *conversation.State) ConversationView {
	v := ConversationView{
		ConversationID: c.ID,
		Status:         c.Status,
		Error:          c.Error,
		Agent:          c.Agent,
		AgentDigest:    c.AgentDigest,
		Caller:         c.Caller,
		Runs:           make([]RunSummary, 0, len(c.Runs)),
		Pending:        c.PendingCalls(),
		Messages:       messagesJSON(c.History, c.Decisions),
		Decisions:      c.Decisions,
	}
	// A note left by a wait that a cancel ended says nothing any more.
	if c.Unserved != "" && (c.Status == conversation.StatusRunning || c.Status == conversation.StatusResuming) {
		t := c.UnservedSince.UTC()
		v.Unserved, v.UnservedSince = c.Unserved, &t
	}
	if b := c.Batch; b != nil && b.Prompt != "" && c.Status == conversation.StatusPaused {
		v.QueuedPrompt = &QueuedPrompt{RunID: b.PromptRunID, Prompt: b.Prompt}
	}
	if v.Decisions == nil {
		v.Decisions = []conversation.DecisionRecord{}
	}
	if c.Status == conversation.StatusCompleted {
		out := c.Output
		v.Output = &out
	}
	for _, r := range c.Runs {
		v.Runs = append(v.Runs, RunSummary{RunID: r.RunID, Status: r.Status})
	}
	return v
}
