// Package agenttool gives an orchestrator embedded in a Go program
// (toolgate.Config, toolgatetest.Options) tools and handlers written in
// Go: tools that run inside the run, beside the ones workers execute;
// approval rules that see the run's context (its history, the
// conversation, the program's Deps); and inline
// handlers that settle deferred calls without publishing them. Everything
// else stays as in a deployed orchestrator: state in JetStream, pauses,
// approvers, expiry.
//
// A tool defers its call by returning deferred.CallDeferred(meta) (an
// external result answers it) or deferred.ApprovalRequired(meta); a
// handler answers with package deferred's constructors (deferred.ValueOf,
// ReturnOf, AskRetry, Fail, Approve, Deny).
package agenttool

import (
	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/deferred"
	iagent "github.com/toolgate/toolgate/internal/agent"
)

// Tool is a tool the agent runs in process; New builds one. Its inside is
// the engine's and opaque.
type Tool iagent.Tool

// Name is the tool's name, as the model calls it.
func (t Tool) Name() string { return iagent.Tool(t).Name() }

// Def is how the tool is described to the model: its name, description
// and the JSON Schema of its args.
func (t Tool) Def() agent.ToolDef { return iagent.Tool(t).Def() }

// Option configures a tool at New; RequireApproval makes one.
type Option iagent.ToolOption

// The run's context and the handlers' types are package agent's, named
// here for the code that builds tools and handlers.
type (
	// RunContext is what a tool, an approval rule or a handler sees of
	// the run: its ids, the caller, its history so far, the call.
	RunContext = agent.RunContext
	// Handler settles deferred calls inside the run.
	Handler = agent.Handler
	// HandlerFunc adapts a function to Handler. The calls it is offered
	// (deferred.Requests) and its answers (deferred.Results) are package
	// deferred's.
	HandlerFunc = agent.HandlerFunc
)

// New builds a tool from a typed function, its args schema derived from
// Args. fn returns its result, a deferred.Return for a result with
// metadata, Retry or Failed, or defers the call with
// deferred.CallDeferred / deferred.ApprovalRequired.
func New[Args, Out any](name, description string, fn func(rc *RunContext, args Args) (Out, error), opts ...Option) (Tool, error) {
	o := make([]iagent.ToolOption, len(opts))
	for i, opt := range opts {
		o[i] = iagent.ToolOption(opt)
	}
	t, err := iagent.NewTool(name, description, fn, o...)
	return Tool(t), err
}

// RequireApproval makes calls of the tool wait for an approver when need
// says so; need sees the run's context and the args, and its reason goes
// to the approvers with the request. An approved call then runs in
// process.
func RequireApproval[Args any](need func(rc *RunContext, args Args) (reason any, required bool)) Option {
	return Option(iagent.WithValidator(func(rc *RunContext, args Args) error {
		if rc.ToolCallApproved {
			return nil
		}
		if reason, required := need(rc, args); required {
			return deferred.ApprovalRequired(reason)
		}
		return nil
	}))
}

// Retry asks the model to call again, telling it msg.
func Retry(msg string) error { return iagent.ModelRetry(msg) }

// Failed fails the call; the model is told msg.
func Failed(msg string) error { return iagent.ToolFailed(msg) }
