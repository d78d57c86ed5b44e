// Package agui drives toolgate conversations from AG-UI 1.0 clients
// (@ag-ui/client's HttpAgent, CopilotKit): POST /v1/agui takes a
// RunAgentInput and answers with the run's AG-UI events as Server-Sent
// Events.
//
// A thread is a conversation. The server's log is the history: of the
// input's messages only the new user message and the tool messages that
// answer the frontend's pending calls are read; the rest must be what the
// server sent (an edited or invented message is refused). A paused
// conversation's approvals are interrupts (RUN_FINISHED with the interrupt
// outcome), answered by the next input's resume entries; its frontend
// calls end the run as a success naming them (pendingToolCallIds),
// answered by tool messages. Every answer goes through
// orchestrator.Answer, the checks of a bot's decision or a worker's
// result, on behalf of the API's authenticated caller.
package agui

import "encoding/json"

// ProtocolVersion is the AG-UI version this adapter speaks.
const ProtocolVersion = "1.0"

// Event types (AG-UI 1.0 EventType).
const (
	evRunStarted     = "RUN_STARTED"
	evRunFinished    = "RUN_FINISHED"
	evRunError       = "RUN_ERROR"
	evTextStart      = "TEXT_MESSAGE_START"
	evTextContent    = "TEXT_MESSAGE_CONTENT"
	evTextEnd        = "TEXT_MESSAGE_END"
	evToolCallStart  = "TOOL_CALL_START"
	evToolCallArgs   = "TOOL_CALL_ARGS"
	evToolCallEnd    = "TOOL_CALL_END"
	evToolCallResult = "TOOL_CALL_RESULT"
)

// RunAgentInput is the request (AG-UI 1.0). Fields the adapter does not
// read (state, context, parentRunId) are accepted and ignored.
type RunAgentInput struct {
	ThreadID        string          `json:"threadId"`
	RunID           string          `json:"runId"`
	ProtocolVersion string          `json:"protocolVersion,omitempty"`
	Messages        []Message       `json:"messages"`
	Tools           []Tool          `json:"tools,omitempty"`
	ForwardedProps  json.RawMessage `json:"forwardedProps,omitempty"`
	Resume          []ResumeEntry   `json:"resume,omitempty"`
}

// Message is one message of the input's history.
type Message struct {
	ID         string          `json:"id"`
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []ToolCall      `json:"toolCalls,omitempty"`
	ToolCallID string          `json:"toolCallId,omitempty"`
}

// ToolCall is an assistant message's tool call.
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Tool is a tool the frontend declares: a frontend tool of the thread's
// runs (orchestrator.StartRequest.FrontendTools).
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ResumeEntry answers one interrupt.
type ResumeEntry struct {
	InterruptID string          `json:"interruptId"`
	Status      string          `json:"status"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Metadata    json.RawMessage `json:"metadata,omitempty"`
}

// approvalPayload is a resume payload answering a tool-call interrupt: the
// responseSchema the interrupt declares. Args, when given, are the args the
// user was shown; they must be the call's.
type approvalPayload struct {
	Approved   *bool           `json:"approved"`
	EditedArgs json.RawMessage `json:"editedArgs,omitempty"`
	Message    string          `json:"message,omitempty"`
	Metadata   json.RawMessage `json:"metadata,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
}

// Interrupt is what a paused run waits for (AG-UI 1.0 Interrupt).
type Interrupt struct {
	ID             string          `json:"id"`
	Reason         string          `json:"reason"`
	Message        string          `json:"message,omitempty"`
	ToolCallID     string          `json:"toolCallId,omitempty"`
	ResponseSchema json.RawMessage `json:"responseSchema,omitempty"`
	ExpiresAt      string          `json:"expiresAt,omitempty"`
	Metadata       json.RawMessage `json:"metadata,omitempty"`
}

// outcome is RUN_FINISHED's outcome.
type outcome struct {
	Type               string      `json:"type"`
	Interrupts         []Interrupt `json:"interrupts,omitempty"`
	PendingToolCallIDs []string    `json:"pendingToolCallIds,omitempty"`
}

// responseSchema is the answer a tool-call interrupt expects (the pattern
// the AG-UI interrupt documentation recommends, editedArgs being a full
// replacement).
var responseSchema = json.RawMessage(`{"type":"object","properties":{"approved":{"type":"boolean"},"editedArgs":{"type":"object","description":"Full replacement of the tool args. Not merged."},"message":{"type":"string","description":"Why it was denied, for the model."},"metadata":{"type":"object","description":"Given to the approved tool."}},"required":["approved"]}`)
