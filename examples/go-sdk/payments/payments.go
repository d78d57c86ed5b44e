// Package payments is an embedded agent's own tools: Go functions that run
// inside the orchestrator's runs (no worker), one of which asks for
// approval when the run's context says so.
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

// Tools are convert (in process, no approval) and pay (in process, held
// for an approver when large or when it is the conversation's first
// request, judged from the run's history).
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
			return map[string]any{"reason": "large payment", "history": len(rc.Messages)}, a.Cents > 10_000
		}))
	if err != nil {
		return nil, err
	}
	return []agenttool.Tool{convert, pay}, nil
}
