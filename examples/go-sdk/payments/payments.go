// Package payments is an embedded agent's own tools: Go functions that run
// inside the orchestrator's runs (no worker), one of which asks for
// approval when the run's context and the program's Deps say so.
// cmd/payments-agent runs them in an orchestrator embedded with package
// toolgate.
package payments

import (
	"fmt"

	"github.com/toolgate/toolgate/agenttool"
)

// PayArgs are the args of pay.
type PayArgs struct {
	Cents int    `json:"cents"`
	To    string `json:"to"`
}

// Deps is what the program gives every run (toolgate.Config.Deps): here,
// the amount above which a payment needs an approver.
type Deps struct {
	ApprovalOverCents int
}

// Tools are convert (in process, no approval) and pay (in process, held
// for an approver when over Deps.ApprovalOverCents, with a reason that
// tells the approver how long the run's history is).
func Tools() ([]agenttool.Tool, error) {
	convert, err := agenttool.New("convert", "Convert euros to cents.",
		func(_ *agenttool.RunContext, a struct {
			Euros float64 `json:"euros"`
		}) (int, error) {
			if a.Euros < 0 {
				return 0, agenttool.Retry("euros must not be negative")
			}
			return int(a.Euros * 100), nil
		})
	if err != nil {
		return nil, err
	}
	pay, err := agenttool.New("pay", "Pay cents to someone.",
		func(_ *agenttool.RunContext, a PayArgs) (string, error) {
			return fmt.Sprintf("paid %d cents to %s", a.Cents, a.To), nil
		},
		agenttool.RequireApproval(func(rc *agenttool.RunContext, a PayArgs) (any, bool) {
			over := rc.Deps.(*Deps).ApprovalOverCents
			return map[string]any{"reason": "large payment", "over": over, "history": len(rc.Messages)}, a.Cents > over
		}))
	if err != nil {
		return nil, err
	}
	return []agenttool.Tool{convert, pay}, nil
}
