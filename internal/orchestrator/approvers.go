package orchestrator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Approvers says who may decide a tool's calls (ToolConfig.Approvers):
// names (approver names as in AgentConfig.Trust or the API's users, or
// roles), or a CEL rule over the decider's identity. In the agent file it
// is a list of names or an object {rule: EXPR}; the zero value lets anyone
// trusted decide.
type Approvers struct {
	Names []string
	// Rule is a CEL expression (package rule's dialect) that must yield
	// true for the decider; see ApproverRule for its variables.
	Rule string
	// Compiled is Rule compiled (package agentconfig compiles it at load).
	// A Rule not compiled admits no one.
	Compiled ApproverRule
}

// IsZero reports whether a names no one and has no rule.
func (a Approvers) IsZero() bool { return len(a.Names) == 0 && a.Rule == "" }

// MarshalJSON writes a list of names, or {"rule": EXPR}, as the agent file
// has them; so the digest of a config with a list of approvers is what it
// was before the rule form existed.
func (a Approvers) MarshalJSON() ([]byte, error) {
	if a.Rule != "" {
		return json.Marshal(struct {
			Rule string `json:"rule"`
		}{a.Rule})
	}
	return json.Marshal(a.Names)
}

// UnmarshalJSON reads a list of names or an object {"rule": EXPR}.
func (a *Approvers) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	*a = Approvers{}
	if len(b) > 0 && b[0] == '{' {
		var o struct {
			Rule string `json:"rule"`
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			return fmt.Errorf("approvers: want a list of names or {rule: EXPR}: %w", err)
		}
		if o.Rule == "" {
			return errors.New("approvers: {rule: EXPR} with an empty rule")
		}
		a.Rule = o.Rule
		return nil
	}
	if err := json.Unmarshal(b, &a.Names); err != nil {
		return errors.New("approvers: want a list of names or {rule: EXPR}")
	}
	return nil
}

// Decider is who decides a call, as an approvers rule sees it (the
// `decider` variable): its id (the decision's or grant's approver), the
// roles (AgentConfig.Roles) that list it, sorted, and its trusted key
// (base64; "" when AgentConfig.Trust has none for it).
type Decider struct {
	ID    string
	Roles []string
	Key   string
}

// ApproverRule is an approvers rule compiled: whether decider may decide
// a call of tool with args in the run's context rc (the variables of an
// approval rule, docs/rules.md). An error admits no one, and says why.
type ApproverRule interface {
	Admits(decider Decider, tool string, args json.RawMessage, rc RuleContext) (bool, error)
}

// RuleContext is what a rule (a ContextRule, an ApproverRule) sees of the
// run besides the call.
type RuleContext struct {
	// Caller is the run's caller object (StartRequest.Caller); nil when
	// none was given.
	Caller json.RawMessage
	// Metadata is the tool's approval_metadata: what approvers would be
	// shown with the call.
	Metadata json.RawMessage
	// ConversationID and Agent name the conversation and its agent.
	ConversationID, Agent string
	// Runs counts the conversation's runs, this one included.
	Runs int
	// Calls are the tool calls made so far, oldest first, with their
	// outcomes (success, denied, failed, retry; "" while unanswered).
	Calls []RuleCall
}

// RuleCall is one tool call of RuleContext.Calls.
type RuleCall struct{ Tool, Outcome string }
