package wire

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode"
)

// ValidationError says which field of a wire message is wrong and why.
type ValidationError struct {
	Message string // "call request", "approval request", "call reply", "decision", "event"
	Field   string // the JSON name of the field
	Reason  string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Message, e.Field, e.Reason)
}

// Validator is implemented by every wire message; Decode calls it.
type Validator interface{ Validate() error }

type checker struct {
	msg string
	err error
}

func (c *checker) fail(field, format string, args ...any) {
	if c.err == nil {
		c.err = &ValidationError{Message: c.msg, Field: field, Reason: fmt.Sprintf(format, args...)}
	}
}

// token: a value used in subjects, consumer names or KV keys.
func (c *checker) token(field, v string) {
	if err := ValidateToken(field, v); err != nil {
		c.fail(field, "%s", trimWhat(err.Error(), field))
	}
}

func trimWhat(s, what string) string {
	if len(s) > len(what) && s[:len(what)] == what {
		return s[len(what)+1:]
	}
	return s
}

// id: required, printable, fits a header value.
func (c *checker) id(field, v string) {
	if v == "" {
		c.fail(field, "is empty")
		return
	}
	if len(v) > 1024 {
		c.fail(field, "is longer than 1024 bytes")
		return
	}
	for _, r := range v {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			c.fail(field, "contains a control or invalid character")
			return
		}
	}
}

func (c *checker) object(field string, v json.RawMessage, required bool) {
	if len(v) == 0 {
		if required {
			c.fail(field, "is missing")
		}
		return
	}
	if !json.Valid(v) {
		c.fail(field, "is not valid JSON")
		return
	}
	if t := bytes.TrimLeft(v, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		c.fail(field, "is not a JSON object")
	}
}

func (c *checker) json(field string, v json.RawMessage) {
	if len(v) != 0 && !json.Valid(v) {
		c.fail(field, "is not valid JSON")
	}
}

// when: a time both encodings can carry (JSON's is RFC 3339, years 0-9999).
func (c *checker) when(field string, t time.Time) {
	if y := t.UTC().Year(); y < 0 || y > 9999 {
		c.fail(field, "year %d is out of range", y)
	}
}

func (c *checker) digest(field, v string) {
	if len(v) != 64 {
		c.fail(field, "is not a hex SHA-256 digest")
		return
	}
	if _, err := hex.DecodeString(v); err != nil {
		c.fail(field, "is not a hex SHA-256 digest")
	}
}

// Validate checks the fields a worker relies on.
func (r CallRequest) Validate() error {
	c := checker{msg: "call request"}
	c.token("run_id", r.RunID)
	c.token("conversation_id", r.ConversationID)
	c.id("tool_call_id", r.ToolCallID)
	c.token("tool_name", r.ToolName)
	c.object("args", r.Args, true)
	c.object("metadata", r.Metadata, false)
	c.when("deadline", r.Deadline)
	if r.Attempt < 0 {
		c.fail("attempt", "is negative")
	}
	return c.err
}

// Validate checks the fields an approver relies on, including that
// args_digest is DigestArgs(args).
func (r ApprovalRequest) Validate() error {
	c := checker{msg: "approval request"}
	c.token("run_id", r.RunID)
	c.token("conversation_id", r.ConversationID)
	c.id("tool_call_id", r.ToolCallID)
	c.token("tool_name", r.ToolName)
	c.object("parameters", r.Parameters, false)
	c.object("args", r.Args, true)
	c.digest("args_digest", r.ArgsDigest)
	c.object("metadata", r.Metadata, false)
	c.json("caller", r.Caller)
	c.when("deadline", r.Deadline)
	if r.Attempt < 0 {
		c.fail("attempt", "is negative")
	}
	if c.err == nil {
		if d, err := DigestArgs(r.Args); err != nil || d != r.ArgsDigest {
			c.fail("args_digest", "does not match args")
		}
	}
	return c.err
}

// Validate checks the fields the orchestrator relies on.
func (r CallReply) Validate() error {
	c := checker{msg: "call reply"}
	c.token("run_id", r.RunID)
	c.id("tool_call_id", r.ToolCallID)
	switch r.Outcome {
	case OutcomeReturn:
	case OutcomeRetry, OutcomeFailed:
		if r.Message == "" {
			c.fail("message", "is empty for outcome %q", r.Outcome)
		}
	case "":
		c.fail("outcome", "is missing")
	default:
		c.fail("outcome", "unknown outcome %q", r.Outcome)
	}
	c.json("value", r.Value)
	c.object("metadata", r.Metadata, false)
	return c.err
}

// Validate checks the decision's form; whether the orchestrator accepts it
// (a pending call, the same digest, a trusted signature) is decided there.
func (d Decision) Validate() error {
	c := checker{msg: "decision"}
	c.token("run_id", d.RunID)
	c.id("tool_call_id", d.ToolCallID)
	c.digest("args_digest", d.ArgsDigest)
	c.object("override_args", d.OverrideArgs, false)
	if len(d.OverrideArgs) != 0 && !d.Approved {
		c.fail("override_args", "is set on a denial")
	}
	c.object("metadata", d.Metadata, false)
	c.id("approver_id", d.ApproverID)
	if d.DecidedAt.IsZero() {
		c.fail("decided_at", "is missing")
	}
	c.when("decided_at", d.DecidedAt)
	if len(d.Signature) != 0 && len(d.Signature) != ed25519.SignatureSize {
		c.fail("signature", "is %d bytes, want %d", len(d.Signature), ed25519.SignatureSize)
	}
	return c.err
}

// Validate checks an EventBatch: 1 to MaxEventBatch valid events, all of one
// conversation.
func (b EventBatch) Validate() error { return b.validate(true) }

// ValidateEncoded is Validate for a batch of events whose data
// encoding/json produced (ValidateEncoded of Event).
func (b EventBatch) ValidateEncoded() error { return b.validate(false) }

func (b EventBatch) validate(data bool) error {
	if len(b.Events) == 0 {
		return errors.New("event batch: events: is empty")
	}
	if len(b.Events) > MaxEventBatch {
		return fmt.Errorf("event batch: events: more than %d", MaxEventBatch)
	}
	for i, e := range b.Events {
		if err := e.validate(data); err != nil {
			return fmt.Errorf("event batch: events[%d]: %w", i, err)
		}
		if e.ConversationID != b.Events[0].ConversationID {
			return fmt.Errorf("event batch: events[%d]: conversation_id %q is not the batch's %q", i, e.ConversationID, b.Events[0].ConversationID)
		}
	}
	return nil
}

// Validate checks an event's addressing fields, its time, and that its
// data is JSON.
func (e Event) Validate() error { return e.validate(true) }

// ValidateEncoded is Validate for an event whose data encoding/json
// produced, which writes nothing but valid JSON: the data is not scanned
// again, which is most of what Validate costs its producer.
func (e Event) ValidateEncoded() error { return e.validate(false) }

func (e Event) validate(data bool) error {
	c := checker{msg: "event"}
	c.token("conversation_id", e.ConversationID)
	if e.RunID != "" {
		c.token("run_id", e.RunID)
	}
	if e.Type == "" {
		c.fail("type", "is empty")
	}
	if e.ToolCallID != "" {
		c.id("tool_call_id", e.ToolCallID)
	}
	if data {
		c.json("data", e.Data)
	}
	c.when("time", e.Time)
	return c.err
}
