// Package agenttool gives an orchestrator embedded in a Go program
// (toolgate.Config, toolgatetest.Options) tools and handlers written in
// Go: tools that run inside the run, beside the ones workers execute;
// approval rules that see the run's context (its history, the
// conversation, the program's Deps); and inline
// handlers that settle deferred calls without publishing them. Everything
// else stays as in a deployed orchestrator: state in JetStream, pauses,
// approvers, expiry.
//
// The types are the agent engine's (internal/agent), named here so that
// code outside the repository can use them.
package agenttool

import (
	"github.com/toolgate/toolgate/deferred"
	"github.com/toolgate/toolgate/internal/agent"
)

type (
	// Tool is a tool the agent runs in process.
	Tool = agent.Tool
	// RunContext is what a tool, an approval rule or a handler sees of
	// the run: its ids, its history so far (Messages), the call.
	RunContext = agent.RunContext
	// Option configures a tool.
	Option = agent.ToolOption
	// Handler settles deferred calls inside the run.
	Handler = agent.Handler
	// HandlerFunc adapts a function to Handler.
	HandlerFunc = agent.HandlerFunc
	// Requests are the deferred calls of a step; Results answer them.
	Requests = deferred.Requests
	Results  = deferred.Results
	// Approved and Denied answer an approval in Results.
	Approved = deferred.Approved
	Denied   = deferred.Denied
)

// New builds a tool from a typed function, its args schema derived from
// Args. fn returns its result, or Retry / Failed.
func New[Args, Out any](name, description string, fn func(rc *RunContext, args Args) (Out, error), opts ...Option) (Tool, error) {
	return agent.NewTool(name, description, fn, opts...)
}

// RequireApproval makes calls of the tool wait for an approver when need
// says so; need sees the run's context and the args, and its reason goes
// to the approvers with the request. An approved call then runs in
// process.
func RequireApproval[Args any](need func(rc *RunContext, args Args) (reason any, required bool)) Option {
	return agent.WithValidator(func(rc *RunContext, args Args) error {
		if rc.ToolCallApproved {
			return nil
		}
		if reason, required := need(rc, args); required {
			return deferred.ApprovalRequired(reason)
		}
		return nil
	})
}

// Retry asks the model to call again, telling it msg.
func Retry(msg string) error { return agent.ModelRetry(msg) }

// Failed fails the call; the model is told msg.
func Failed(msg string) error { return agent.ToolFailed(msg) }
