// Package aisdk drives toolgate conversations from the Vercel AI SDK's
// chat (useChat, AbstractChat with DefaultChatTransport, ai 7.x): POST
// /v1/ai-sdk/chat takes the chat's request ({id, messages, trigger}) and
// answers with the UI message stream (Server-Sent Events of UI message
// chunks, header x-vercel-ai-ui-message-stream: v1).
//
// A chat is a conversation. The server's log is the history: of the
// request's messages only the new user message and the answers to the
// conversation's pending calls are read; the rest must be what the server
// sent (an edited or invented message, a tool part the server did not
// stream, an answer to a call that does not wait for it: refused with the
// stream's error chunk, nothing applied). An approval-required call is
// sent as a tool-approval-request chunk and answered by the next request's
// tool part in state approval-responded (addToolApprovalResponse); a call
// of a frontend tool is answered by its tool part in state
// output-available or output-error (addToolOutput). Every answer goes
// through orchestrator.Answer, the checks of a bot's decision or a
// worker's result, on behalf of the API's authenticated caller.
//
// GET /v1/ai-sdk/chat/{id}/stream, where the transport reconnects,
// replays the chat's last assistant message and follows it live; with the
// Last-Event-ID of a chunk (every chunk has an SSE id), it goes on with
// that chunk's response after it.
package aisdk

import "encoding/json"

// Request is what DefaultChatTransport posts: the chat's id, its messages
// and the trigger; agent (a field of the transport's body option) names
// the agent of a new chat, else the only one is used.
type Request struct {
	ID        string      `json:"id"`
	Messages  []UIMessage `json:"messages"`
	Trigger   string      `json:"trigger"`
	MessageID string      `json:"messageId,omitempty"`
	Agent     string      `json:"agent,omitempty"`
}

// UIMessage is one message of the chat's history (ai's UIMessage).
type UIMessage struct {
	ID    string `json:"id"`
	Role  string `json:"role"`
	Parts []Part `json:"parts"`
}

// Part is a message part; only the fields of the parts the adapter reads
// (text, step-start, tool-<name> and dynamic-tool) are decoded.
type Part struct {
	Type       string          `json:"type"`
	Text       string          `json:"text,omitempty"`
	ToolCallID string          `json:"toolCallId,omitempty"`
	ToolName   string          `json:"toolName,omitempty"`
	State      string          `json:"state,omitempty"`
	Input      json.RawMessage `json:"input,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	ErrorText  string          `json:"errorText,omitempty"`
	Approval   *Approval       `json:"approval,omitempty"`
}

// Approval is a tool part's approval: the request the server sent (id)
// and, once responded, the user's answer.
type Approval struct {
	ID       string `json:"id"`
	Approved *bool  `json:"approved,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// The states of a tool part (ai's UIToolInvocation).
const (
	stateInputStreaming    = "input-streaming"
	stateInputAvailable    = "input-available"
	stateApprovalRequested = "approval-requested"
	stateApprovalResponded = "approval-responded"
	stateOutputAvailable   = "output-available"
	stateOutputError       = "output-error"
	stateOutputDenied      = "output-denied"
)
