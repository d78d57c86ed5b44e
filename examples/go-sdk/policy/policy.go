// Package policy is an approval bot's rule, in Go: it sees the whole
// request (tool, args, the reason the agent gave) and approves, approves
// with changed args, denies with a message for the model, or escalates to
// a human.
package policy

import (
	"context"
	"encoding/json"

	"github.com/toolgate/toolgate/approval"
)

// Limit is the largest transfer the bot approves alone.
const Limit = 1000

// Decide is the bot's rule.
func Decide(_ context.Context, req approval.Request) (approval.Verdict, error) {
	switch req.ToolName {
	case "transfer":
		var a struct {
			Amount float64 `json:"amount"`
			To     string  `json:"to"`
		}
		if err := json.Unmarshal(req.Args, &a); err != nil {
			return approval.Deny("transfer args are not readable"), nil
		}
		if a.Amount > Limit {
			return approval.Escalate(), nil // a human decides in the inbox
		}
		return approval.Approve(), nil
	case "send_mail":
		// Mail goes to review first, whatever the model chose.
		var a map[string]any
		if err := json.Unmarshal(req.Args, &a); err != nil {
			return approval.Deny("mail args are not readable"), nil
		}
		a["to"] = "review@example.com"
		return approval.ApproveWithArgs(a), nil
	}
	return approval.Deny("this bot approves only transfers and mail"), nil
}
