// Package agent holds the types a Go program meets of an agent run: the
// Model the run asks at each step and what it exchanges with it (Message,
// Part, ModelRequest, ModelResponse, ToolDef, Usage), the RunContext that
// in-process tools, approval rules and inline handlers see, and Handler,
// which settles deferred calls inside the run.
//
// It holds no loop: toolgate.New runs the agent, package agenttool builds
// tools. The deferred calls' vocabulary is package deferred's.
package agent
