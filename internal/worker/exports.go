package worker

import (
	"github.com/toolgate/toolgate/internal/worker/builtin"
	"github.com/toolgate/toolgate/internal/worker/command"
	"github.com/toolgate/toolgate/internal/worker/executor"
	"github.com/toolgate/toolgate/internal/worker/mcpexec"
	"github.com/toolgate/toolgate/internal/worker/webhook"
)

// The executors live in packages of their own, so that a program links
// only those it runs; these names gather them for the module's tests and
// tools, which use them all.

// Tools and executors (package executor).
type (
	Tool         = executor.Tool
	ToolSpec     = executor.ToolSpec
	Executor     = executor.Executor
	ExecutorFunc = executor.Func
)

// TimedOutMessage is the message of a failed reply for a call whose deadline
// passed before it finished (D37).
const TimedOutMessage = executor.TimedOutMessage

// Reply forms and the reading of an external tool's output.
var (
	ReturnValue    = executor.ReturnValue
	Failed         = executor.Failed
	Retry          = executor.Retry
	ParseResult    = executor.ParseResult
	IdempotencyKey = executor.IdempotencyKey
)

// The exec executor (package command).
type Command = command.Command

// ExitRetry is the exit status with which a command asks the model to retry.
const ExitRetry = command.ExitRetry

var (
	NewCommand = command.New
	SplitWords = command.SplitWords
)

// The http executor (package webhook).
type Webhook = webhook.Webhook

// Defaults of Webhook.Retries and Webhook.Backoff.
const (
	DefaultWebhookRetries = webhook.DefaultRetries
	DefaultWebhookBackoff = webhook.DefaultBackoff
)

// The built-in tools (package builtin).
type Builtin = builtin.Builtin

// Names of the built-in tools.
const (
	ToolUpdateFile      = builtin.ToolUpdateFile
	ToolDeleteFile      = builtin.ToolDeleteFile
	ToolReadFile        = builtin.ToolReadFile
	ToolCalculateAnswer = builtin.ToolCalculateAnswer
	ToolSendToWorker    = builtin.ToolSendToWorker
	ToolNoop            = builtin.ToolNoop
)

var (
	NewBuiltin   = builtin.New
	BuiltinTools = builtin.Tools
)

// The MCP executor (package mcpexec).
type (
	MCPServer = mcpexec.Server
	MCPConfig = mcpexec.Config
)

var (
	NewMCPServer = mcpexec.New
	AddMCPHeader = mcpexec.AddHeader
)
