// Package executor is what tool-worker's executors share: the Executor
// interface, the tool a worker serves, the forms of a reply and the reading
// of an external tool's output (ParseResult). Each executor lives in a
// package of its own (command, webhook, mcpexec, builtin), so that a
// program links only those it runs.
package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/toolgate/toolgate/internal/worker/callctx"
	"github.com/toolgate/toolgate/wire"
)

// Executor runs one external call. It fills the outcome fields of the reply
// (Outcome, Value, Content, Message, Metadata); the worker sets RunID,
// ToolCallID and WorkerID.
//
// A tool that fails answers with a reply of outcome failed (or retry) and a
// nil error. A non-nil error means the call could not be attempted or its
// result could not be obtained for reasons unrelated to the tool's answer (a
// webhook down, the worker shutting down): the call is released and retried
// later.
type Executor interface {
	Execute(ctx context.Context, req wire.CallRequest) (wire.CallReply, error)
}

// Func adapts a function to Executor.
type Func func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error)

// Execute calls f(ctx, req).
func (f Func) Execute(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
	return f(ctx, req)
}

// TimedOutMessage is the message of a failed reply for a call whose deadline
// passed before it finished (D37).
const TimedOutMessage = callctx.TimedOutMessage

// WithCallDeadline bounds ctx by the call's deadline; a zero deadline means
// none. TimedOut reports whether ctx ended because of that deadline.
func WithCallDeadline(ctx context.Context, req wire.CallRequest) (context.Context, context.CancelFunc) {
	return callctx.WithDeadline(ctx, req.Deadline)
}

// TimedOut reports whether ctx ended because its call's deadline passed.
func TimedOut(ctx context.Context) bool { return callctx.TimedOut(ctx) }

// Reply constructors for executors.

// ReturnValue is a reply with outcome return and the JSON value v.
func ReturnValue(v json.RawMessage) wire.CallReply {
	return wire.CallReply{Outcome: wire.OutcomeReturn, Value: v}
}

// Failed is a reply with outcome failed.
func Failed(format string, args ...any) wire.CallReply {
	return wire.CallReply{Outcome: wire.OutcomeFailed, Message: fmt.Sprintf(format, args...)}
}

// Retry is a reply with outcome retry: the model is asked to try again.
func Retry(format string, args ...any) wire.CallReply {
	return wire.CallReply{Outcome: wire.OutcomeRetry, Message: fmt.Sprintf(format, args...)}
}

// resultForm is the union of Pydantic AI's serialized result shapes (D34):
// {"kind":"tool-return","return_value":…,"content":…,"metadata":…},
// {"kind":"model-retry","message":…} and {"kind":"tool-failed","message":…}.
type resultForm struct {
	Kind        string          `json:"kind"`
	ReturnValue json.RawMessage `json:"return_value"`
	Content     json.RawMessage `json:"content"`
	Metadata    json.RawMessage `json:"metadata"`
	Message     json.RawMessage `json:"message"`
}

// ParseResult turns what an external tool produced (a process's stdout, a
// webhook's body) into a reply:
//   - empty output is the value null;
//   - a JSON object whose "kind" is "tool-return", "model-retry" or
//     "tool-failed" follows Pydantic AI's form of that result;
//   - any other JSON value is returned as the value;
//   - anything else is returned as a JSON string of the trimmed text.
func ParseResult(out []byte) wire.CallReply {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return ReturnValue(json.RawMessage("null"))
	}
	if !json.Valid(out) {
		return ReturnValue(JSONString(string(out)))
	}
	if out[0] == '{' {
		var f resultForm
		if err := json.Unmarshal(out, &f); err == nil {
			switch f.Kind {
			case "tool-return":
				r := wire.CallReply{Outcome: wire.OutcomeReturn, Value: f.ReturnValue, Content: textOf(f.Content)}
				if len(r.Value) == 0 {
					r.Value = json.RawMessage("null")
				}
				if !isNull(f.Metadata) {
					r.Metadata = Compact(f.Metadata)
				}
				r.Value = Compact(r.Value)
				return r
			case "model-retry":
				return wire.CallReply{Outcome: wire.OutcomeRetry, Message: textOf(f.Message)}
			case "tool-failed":
				return wire.CallReply{Outcome: wire.OutcomeFailed, Message: textOf(f.Message)}
			}
		}
	}
	return ReturnValue(Compact(out))
}

// textOf renders a JSON value as text: a string as itself, null or absent as
// "", anything else (Pydantic AI allows lists of user content) as Compact JSON.
func textOf(raw json.RawMessage) string {
	if isNull(raw) {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	return string(Compact(raw))
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

func Compact(raw []byte) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return json.RawMessage(raw)
	}
	return b.Bytes()
}

func JSONString(s string) json.RawMessage {
	if !utf8.ValidString(s) {
		s = string(bytes.ToValidUTF8([]byte(s), []byte("\uFFFD")))
	}
	b, _ := json.Marshal(s) // a valid UTF-8 string always marshals
	return b
}

// Tail keeps the last max bytes written to it, for the end of a process's
// stderr.
type Tail struct {
	Max int // bytes kept
	buf []byte
}

func (t *Tail) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.Max {
		t.buf = append(t.buf[:0], p[len(p)-t.Max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.Max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String is the kept text, trimmed, starting at a valid UTF-8 boundary.
func (t *Tail) String() string {
	b := t.buf
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return string(bytes.TrimSpace(bytes.ToValidUTF8(b, []byte("\uFFFD"))))
}

// LimitedBuffer collects up to max bytes and records whether more came.
type LimitedBuffer struct {
	Max      int          // bytes kept
	Buf      bytes.Buffer // what came, up to Max
	Overflow bool         // more than Max came
}

func (l *LimitedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := l.Max - l.Buf.Len(); len(p) > room {
		l.Overflow = true
		p = p[:max(room, 0)]
	}
	l.Buf.Write(p)
	return n, nil
}

// ToolSpec describes a tool as a model sees it: its name, what it does and
// the JSON Schema (draft 2020-12) of its arguments.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Tool is one tool a worker serves.
type Tool struct {
	// Spec names the tool (required) and, for the toolgate_tools
	// advertisement, describes it; Description and Parameters may be empty.
	Spec ToolSpec
	// Executor runs the tool's calls; required.
	Executor Executor
	// Kind names the executor in the advertisement: "exec", "http",
	// "builtin", "mcp". Defaults to "custom".
	Kind string
}

// IdempotencyKey identifies a call across redeliveries: run_id:tool_call_id.
func IdempotencyKey(req wire.CallRequest) string {
	return req.RunID + ":" + req.ToolCallID
}

// Bounds of what an executor keeps of a tool's output.
const (
	// DefaultMaxOutput bounds a result (stdout, a response body).
	DefaultMaxOutput = 4 << 20
	// StderrTail is how much of the end of a process's stderr is kept
	// for the message of a failed call.
	StderrTail = 2 << 10
)

// ChildEnv drops the worker's own TOOLGATE_* variables (its NATS password
// among them) from what a tool inherits; the call's are added afterwards.
func ChildEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TOOLGATE_") {
			out = append(out, kv)
		}
	}
	return out
}

// RedactURL drops credentials, query and fragment from a URL for logs and
// errors.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid url)"
	}
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}
