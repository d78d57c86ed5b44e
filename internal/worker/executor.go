package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
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

// ExecutorFunc adapts a function to Executor.
type ExecutorFunc func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error)

// Execute calls f(ctx, req).
func (f ExecutorFunc) Execute(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
	return f(ctx, req)
}

// TimedOutMessage is the message of a failed reply for a call whose deadline
// passed before it finished (D37).
const TimedOutMessage = callctx.TimedOutMessage

// withCallDeadline bounds ctx by the call's deadline; a zero deadline means
// none. timedOut reports whether ctx ended because of that deadline.
func withCallDeadline(ctx context.Context, req wire.CallRequest) (context.Context, context.CancelFunc) {
	return callctx.WithDeadline(ctx, req.Deadline)
}

func timedOut(ctx context.Context) bool { return callctx.TimedOut(ctx) }

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
		return ReturnValue(jsonString(string(out)))
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
					r.Metadata = compact(f.Metadata)
				}
				r.Value = compact(r.Value)
				return r
			case "model-retry":
				return wire.CallReply{Outcome: wire.OutcomeRetry, Message: textOf(f.Message)}
			case "tool-failed":
				return wire.CallReply{Outcome: wire.OutcomeFailed, Message: textOf(f.Message)}
			}
		}
	}
	return ReturnValue(compact(out))
}

// textOf renders a JSON value as text: a string as itself, null or absent as
// "", anything else (Pydantic AI allows lists of user content) as compact JSON.
func textOf(raw json.RawMessage) string {
	if isNull(raw) {
		return ""
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	return string(compact(raw))
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

func compact(raw []byte) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return json.RawMessage(raw)
	}
	return b.Bytes()
}

func jsonString(s string) json.RawMessage {
	if !utf8.ValidString(s) {
		s = string(bytes.ToValidUTF8([]byte(s), []byte("\uFFFD")))
	}
	b, _ := json.Marshal(s) // a valid UTF-8 string always marshals
	return b
}

// tail keeps the last max bytes written to it, for the end of a process's
// stderr.
type tail struct {
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String is the kept text, trimmed, starting at a valid UTF-8 boundary.
func (t *tail) String() string {
	b := t.buf
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return string(bytes.TrimSpace(bytes.ToValidUTF8(b, []byte("\uFFFD"))))
}

// limitedBuffer collects up to max bytes and records whether more came.
type limitedBuffer struct {
	max      int
	buf      bytes.Buffer
	overflow bool
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := l.max - l.buf.Len(); len(p) > room {
		l.overflow = true
		p = p[:max(room, 0)]
	}
	l.buf.Write(p)
	return n, nil
}
