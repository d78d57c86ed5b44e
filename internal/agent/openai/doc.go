// Package openai is the agent.Model for OpenAI-compatible chat completions
// servers: the OpenAI API itself and any server that speaks its
// /chat/completions dialect with function tools, such as vLLM, Ollama
// (http://localhost:11434/v1), llama.cpp's llama-server, LM Studio, LiteLLM
// or OpenRouter. Point Config.BaseURL at the server's /v1 root.
//
// The adapter never reads the environment: the OPENAI_* variables that
// openai-go honours by default are ignored, so Config alone decides the
// server, key and retries.
//
// # History mapping
//
// Instructions become the first system message. In each request message the
// tool replies come first, in part order, because OpenAI requires tool
// messages to follow the assistant message that made the calls; system and
// user parts follow. A response message becomes one assistant message with
// its text and its tool calls.
//
// A tool return becomes a "tool" message for its tool_call_id. Its value is
// rendered as text: a JSON string is sent as its plain text, any other value
// as compact JSON, a missing value as "null". A denied call is sent as
// "The tool call was denied: <message>" (just "The tool call was denied."
// when the message is empty or already says so), a failed call as
// "The tool call failed: <message>". A retry prompt is sent as
// "<message>\n\nFix the errors and try again.", as a tool message when it
// answers a call and as a user message otherwise.
//
// # Responses
//
// Text becomes a text part, each tool call a tool-call part. Empty arguments
// become {}. Arguments that are not valid JSON are kept, as a JSON string
// holding the raw text, so the part stays valid JSON and the loop's argument
// validation (which expects an object) turns it into a retry prompt; when such
// a call is sent back in the history its original text is restored.
//
// With Config.Stream the streaming API is used: text deltas go to
// ModelRequest.StreamFunc as they arrive, tool-call fragments are joined by
// index, and usage is requested in the stream. A stream that ends without a
// finish reason is an error, never a silently shortened answer.
//
// # Errors
//
// 408, 409, 429 and 5xx answers (and connection errors) are retried
// (Config.MaxRetries) with a doubling backoff (Config.Backoff), or after the
// wait the answer's Retry-After or Retry-After-Ms asks for; a stream only
// when its answer was an error, never after its first chunk. Errors carry the status code and a short message
// from the provider, never the API key or the whole error body; a 401 is
// reported as ErrUnauthorized and is not retried.
package openai
