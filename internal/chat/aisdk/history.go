package aisdk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/chat"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// The ids the adapter streams are derived from the server's log: the k-th
// model response of run R is text R.m<k>, the approval of call C issued
// with args of digest D is C:D.
func responseID(runID string, k int) string   { return fmt.Sprintf("%s.m%d", runID, k) }
func approvalID(callID, digest string) string { return callID + ":" + digest }

type call struct {
	name string
	args json.RawMessage
}

// transcript is what the server streamed of a conversation: the user
// prompts and the texts of the model's responses in order, every tool
// call made, the results and the decisions recorded.
type transcript struct {
	prompts   []string
	texts     []string
	calls     map[string]call
	results   map[string]agent.Part
	decisions map[string]conversation.DecisionRecord
}

func newTranscript() transcript {
	return transcript{calls: map[string]call{}, results: map[string]agent.Part{}, decisions: map[string]conversation.DecisionRecord{}}
}

func transcriptOf(c *conversation.State) transcript {
	t := newTranscript()
	for _, m := range c.History {
		switch m.Kind {
		case agent.KindResponse:
			var text string
			for _, p := range m.Parts {
				switch p.Kind {
				case agent.PartText:
					text += p.Content
				case agent.PartToolCall:
					t.calls[p.ToolCallID] = call{name: p.ToolName, args: p.Args}
				}
			}
			if text != "" {
				t.texts = append(t.texts, text)
			}
		case agent.KindRequest:
			for _, p := range m.Parts {
				if p.Kind == agent.PartToolReturn || p.Kind == agent.PartRetryPrompt {
					t.results[p.ToolCallID] = p
				}
			}
		}
	}
	for _, d := range c.Decisions {
		t.decisions[d.ToolCallID] = d
	}
	t.prompts = chat.Prompts(c)
	return t
}

// waiting are the calls the conversation waits for an answer to.
type waiting struct {
	approvals map[string]*conversation.PendingCall
	frontend  map[string]*conversation.PendingCall
}

// reading is what a request brings that the server did not send: the new
// user message and the answers to waiting calls, by call id.
type reading struct {
	prompt    string
	promptID  string
	decisions map[string]Part
	results   map[string]Part
	// seen are the calls the client's last message shows.
	seen map[string]bool
}

// read holds the request's messages against the transcript t: the user
// messages before the new one must be the conversation's prompts, the
// assistant texts the server's in order, every tool part a call the
// server made with its args, and a tool part's answer either one to a
// call that waits for it or the answer recorded for it.
func read(msgs []UIMessage, t transcript, w waiting) (reading, error) {
	r := reading{decisions: map[string]Part{}, results: map[string]Part{}, seen: map[string]bool{}}
	var users, texts []string
	var userIDs []string
	for i, m := range msgs {
		last := i == len(msgs)-1
		switch m.Role {
		case "system":
			continue
		case "user":
			var b strings.Builder
			for _, p := range m.Parts {
				if p.Type != "text" {
					return r, fmt.Errorf("user message %s: a %s part; only text is read", m.ID, p.Type)
				}
				b.WriteString(p.Text)
			}
			users = append(users, b.String())
			userIDs = append(userIDs, m.ID)
			continue
		case "assistant":
		default:
			return r, fmt.Errorf("message %s: role %q", m.ID, m.Role)
		}
		for _, p := range m.Parts {
			switch {
			case p.Type == "step-start":
				continue
			case p.Type == "text":
				texts = append(texts, p.Text)
				continue
			case p.Type == "dynamic-tool" || strings.HasPrefix(p.Type, "tool-"):
			default:
				return r, fmt.Errorf("assistant message %s: a %s part the server did not send", m.ID, p.Type)
			}
			if err := r.tool(m.ID, p, t, w); err != nil {
				return r, err
			}
			if last {
				r.seen[p.ToolCallID] = true
			}
		}
	}
	if len(texts) > len(t.texts) {
		return r, fmt.Errorf("the history holds %d assistant texts where the server sent %d", len(texts), len(t.texts))
	}
	for i, text := range texts {
		if text != t.texts[i] {
			return r, fmt.Errorf("assistant text %d is not as the server sent it: a past message was edited", i+1)
		}
	}
	isNew, err := chat.NewPrompt(users, t.prompts)
	if err != nil {
		return r, err
	}
	if n := len(t.prompts); isNew {
		if len(msgs) == 0 || msgs[len(msgs)-1].Role != "user" {
			return r, fmt.Errorf("the new user message must be the last message")
		}
		r.prompt, r.promptID = users[n], userIDs[n]
	}
	return r, nil
}

// tool reads the tool part p of message msgID.
func (r *reading) tool(msgID string, p Part, t transcript, w waiting) error {
	c, ok := t.calls[p.ToolCallID]
	name := strings.TrimPrefix(p.Type, "tool-")
	if p.Type == "dynamic-tool" {
		name = p.ToolName
	}
	if !ok || c.name != name {
		err := fmt.Errorf("message %s: tool call %q of %s is not one the server made", msgID, p.ToolCallID, name)
		if _, pending := w.approvals[p.ToolCallID]; !pending && p.State == stateApprovalResponded {
			return forged(err, p)
		}
		return err
	}
	if p.State != stateInputStreaming && !sameJSON(c.args, p.Input) {
		return fmt.Errorf("message %s: the input of tool call %s is not the call's args", msgID, p.ToolCallID)
	}
	twice := func() error {
		return fmt.Errorf("call %s is answered twice", p.ToolCallID)
	}
	switch p.State {
	case stateInputStreaming, stateInputAvailable, stateApprovalRequested:
		return nil
	case stateApprovalResponded:
		if p.Approval == nil || p.Approval.Approved == nil {
			return fmt.Errorf("message %s: tool call %s is approval-responded without an answer", msgID, p.ToolCallID)
		}
		if pc, pending := w.approvals[p.ToolCallID]; pending {
			if p.Approval.ID != approvalID(pc.ToolCallID, pc.ArgsDigest) {
				return fmt.Errorf("approval %q is not the approval requested for call %s", p.Approval.ID, p.ToolCallID)
			}
			if _, dup := r.decisions[p.ToolCallID]; dup {
				return twice()
			}
			r.decisions[p.ToolCallID] = p
			return nil
		}
		// An earlier answer kept in the history: not read again, but it
		// must be the decision recorded.
		d, decided := t.decisions[p.ToolCallID]
		digest, _ := deferred.ArgsDigest(c.args)
		if !decided || d.Approved != *p.Approval.Approved || p.Approval.ID != approvalID(p.ToolCallID, digest) {
			return forged(fmt.Errorf("approval response %q for call %s: the call waits for no approval and this is not the decision recorded", p.Approval.ID, p.ToolCallID), p)
		}
		return nil
	case stateOutputAvailable, stateOutputError:
		if _, pending := w.frontend[p.ToolCallID]; pending {
			if _, dup := r.results[p.ToolCallID]; dup {
				return twice()
			}
			r.results[p.ToolCallID] = p
			return nil
		}
		rec, done := t.results[p.ToolCallID]
		if !done || !sameResult(p, rec) {
			return fmt.Errorf("tool output for call %s: the server did not ask the frontend for it, and it is not the result recorded", p.ToolCallID)
		}
		return nil
	case stateOutputDenied:
		if rec, done := t.results[p.ToolCallID]; !done || rec.Outcome != agent.OutcomeDenied {
			return fmt.Errorf("tool call %s is output-denied but was not denied", p.ToolCallID)
		}
		return nil
	}
	return fmt.Errorf("message %s: tool call %s in state %q", msgID, p.ToolCallID, p.State)
}

// resultOf is the answer a frontend's tool part gives: its output, read as
// an executor's output is (orchestrator.ResultOf), or its error text as a
// failure.
func resultOf(p Part) (*orchestrator.AnswerResult, error) {
	if p.State == stateOutputError {
		raw, _ := json.Marshal(map[string]string{"kind": "tool-failed", "message": p.ErrorText})
		return orchestrator.ResultOf(raw)
	}
	out := p.Output
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	return orchestrator.ResultOf(out)
}

// sameResult reports whether a tool part's output is the result recorded.
func sameResult(p Part, rec agent.Part) bool {
	if p.State == stateOutputError {
		return rec.Kind == agent.PartRetryPrompt && rec.Content == p.ErrorText ||
			rec.Kind == agent.PartToolReturn && rec.Outcome == agent.OutcomeFailed && resultText(rec) == p.ErrorText
	}
	return rec.Kind == agent.PartToolReturn && rec.Outcome != agent.OutcomeFailed && rec.Outcome != agent.OutcomeDenied && sameJSON(outputOf(rec), p.Output)
}

// outputOf is the output streamed for a recorded result.
func outputOf(p agent.Part) json.RawMessage {
	if len(p.Value) == 0 {
		raw, _ := json.Marshal(p.Content)
		return raw
	}
	return p.Value
}

// resultText is a failure's or a retry's message.
func resultText(p agent.Part) string {
	if p.Kind == agent.PartRetryPrompt {
		return p.Content
	}
	var s string
	if json.Unmarshal(p.Value, &s) == nil {
		return s
	}
	if len(p.Value) == 0 {
		return p.Content
	}
	return string(p.Value)
}

func sameJSON(a, b json.RawMessage) bool {
	norm := func(r json.RawMessage) json.RawMessage {
		if len(bytes.TrimSpace(r)) == 0 {
			return json.RawMessage("{}")
		}
		return r
	}
	ca, err1 := deferred.CanonicalJSON(norm(a))
	cb, err2 := deferred.CanonicalJSON(norm(b))
	return err1 == nil && err2 == nil && bytes.Equal(ca, cb)
}

// forged is err, carrying the decision the approval-responded part p
// would be: the orchestrator refuses it (the call waits for none) and
// records the attempt.
func forged(err error, p Part) error {
	if p.Approval == nil || p.Approval.Approved == nil {
		return err
	}
	_, digest, _ := strings.Cut(p.Approval.ID, ":")
	return &forgedError{err: err, answer: orchestrator.Answer{ToolCallID: p.ToolCallID,
		Decision: &orchestrator.AnswerDecision{ArgsDigest: digest, Approved: *p.Approval.Approved, Message: p.Approval.Reason}}}
}
