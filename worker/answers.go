package worker

import (
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/wire"
)

// answerError is an answer given as an error: Retry or Fail.
type answerError struct {
	outcome wire.Outcome
	msg     string
}

func (e *answerError) Error() string { return string(e.outcome) + ": " + e.msg }

// Retry is the answer "call again": the model is told msg (what was wrong
// with its call) and may call the tool again. Return it as a handler's
// error.
func Retry(format string, args ...any) error {
	return &answerError{outcome: wire.OutcomeRetry, msg: nonEmpty(fmt.Sprintf(format, args...))}
}

// Fail is the answer "the call failed": the model is told msg. Return it
// as a handler's error. Unlike other errors, it is not delivered again.
func Fail(format string, args ...any) error {
	return &answerError{outcome: wire.OutcomeFailed, msg: nonEmpty(fmt.Sprintf(format, args...))}
}

// A retry or failure must say something (the wire refuses an empty one).
func nonEmpty(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// Return is the reply with outcome return and v, marshalled to JSON, as
// its value; for handlers that build replies themselves.
func Return(v any) (Reply, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return Reply{}, Fail("result is not JSON: %v", err)
	}
	return Reply{Outcome: wire.OutcomeReturn, Value: raw}, nil
}
