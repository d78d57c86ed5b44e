package agent

import "github.com/toolgate/toolgate/agent"

// The types a run is made of are the public package agent's, so that a
// program's models, tools and handlers share them with the loop.
type (
	Model         = agent.Model
	ModelRequest  = agent.ModelRequest
	ModelResponse = agent.ModelResponse
	ToolDef       = agent.ToolDef
	Message       = agent.Message
	MessageKind   = agent.MessageKind
	Part          = agent.Part
	PartKind      = agent.PartKind
	Outcome       = agent.Outcome
	Usage         = agent.Usage
	RunContext    = agent.RunContext
	Handler       = agent.Handler
	HandlerFunc   = agent.HandlerFunc
)

const (
	KindRequest  = agent.KindRequest
	KindResponse = agent.KindResponse

	PartSystemPrompt = agent.PartSystemPrompt
	PartUserPrompt   = agent.PartUserPrompt
	PartText         = agent.PartText
	PartToolCall     = agent.PartToolCall
	PartToolReturn   = agent.PartToolReturn
	PartRetryPrompt  = agent.PartRetryPrompt

	OutcomeSuccess = agent.OutcomeSuccess
	OutcomeDenied  = agent.OutcomeDenied
	OutcomeFailed  = agent.OutcomeFailed
)
