package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// RecordOptions selects a page of dead letters or audit records, newest
// first.
type RecordOptions struct {
	// ConversationID and ToolCallID keep only the records of that
	// conversation or tool call; empty keeps all.
	ConversationID, ToolCallID string
	// Since keeps only the records stored at or after it: an RFC 3339
	// time, or a duration back from now ("90m"); empty keeps all.
	Since string
	// Limit is the page size; 0 is the orchestrator's default (100).
	Limit int
	// Cursor is the previous page's NextCursor; empty starts at the newest.
	Cursor string
}

func (o RecordOptions) query() string {
	q := url.Values{}
	for k, v := range map[string]string{"conversation": o.ConversationID, "tool_call_id": o.ToolCallID, "since": o.Since, "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// DeadLetter is a message that could not be handled, as GET /v1/dlq
// shows it (docs/protocol.md, "Dead letters").
type DeadLetter struct {
	// Seq is its sequence in TOOLGATE_DLQ; Time when it was stored there.
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Kind is decode, invalid, handler or max_deliveries; Reason says why
	// in words.
	Kind   string `json:"kind"`
	Reason string `json:"reason"`
	// Subject, Stream and StreamSeq say where the original was stored,
	// Consumer which consumer gave up on it.
	Subject   string `json:"subject"`
	Stream    string `json:"stream"`
	StreamSeq uint64 `json:"stream_seq"`
	Consumer  string `json:"consumer,omitempty"`
	// ConversationID, RunID and ToolCallID are the original's, when its
	// headers or body name them.
	ConversationID string `json:"conversation_id,omitempty"`
	RunID          string `json:"run_id,omitempty"`
	ToolCallID     string `json:"tool_call_id,omitempty"`
	// Truncated is the original body's size when the copy keeps only its
	// beginning.
	Truncated int `json:"truncated,omitempty"`
	// Body is the original body as JSON when it decodes (JSON or
	// msgpack); else BodyBase64 holds its bytes.
	Body       json.RawMessage `json:"body,omitempty"`
	BodyBase64 []byte          `json:"body_base64,omitempty"`
}

// DeadLetterPage is a page of dead letters, newest first.
type DeadLetterPage struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	// NextCursor asks for the next (older) page; empty after the last.
	NextCursor string `json:"next_cursor,omitempty"`
}

// AuditRecord is an entry of the audit stream (TOOLGATE_AUDIT: every
// decision, refused or late result), as GET /v1/audit shows it: the
// record (wire.AuditRecord) and its place in the stream.
type AuditRecord struct {
	// Seq is the record's sequence in TOOLGATE_AUDIT.
	Seq uint64 `json:"seq"`
	// Kind is the reply's category: "approval" (a decision) or "call" (a
	// result).
	Kind string `json:"kind"`
	// Verdict is applied, counted (an approval towards its tool's
	// quorum), refused or late, or unreadable for a record that cannot be
	// decoded; Reason says why when it is not applied.
	Verdict string `json:"verdict"`
	Reason  string `json:"reason,omitempty"`
	// ConversationID, RunID, ToolCallID and ToolName name the call.
	ConversationID string `json:"conversation_id,omitempty"`
	RunID          string `json:"run_id"`
	ToolCallID     string `json:"tool_call_id"`
	ToolName       string `json:"tool_name,omitempty"`
	// ApproverID, Approved, Signed, ArgsDigest, OverrideArgs and Message
	// are a decision's: who decided, whether it approved, whether its
	// signature was checked, the digest of the args it was made for, the
	// args it approved instead and what a denial told the model.
	ApproverID   string          `json:"approver_id,omitempty"`
	Approved     *bool           `json:"approved,omitempty"`
	Signed       bool            `json:"signed,omitempty"`
	ArgsDigest   string          `json:"args_digest,omitempty"`
	OverrideArgs json.RawMessage `json:"override_args,omitempty"`
	Message      string          `json:"message,omitempty"`
	// WorkerID is a result's worker.
	WorkerID string `json:"worker_id,omitempty"`
	// Grant is the standing decision that decided the call, when one did;
	// no reply was then asked for.
	Grant string `json:"grant,omitempty"`
	// ReplySeq is the reply's sequence in TOOLGATE_REPLIES; Time when the
	// record was made.
	ReplySeq uint64    `json:"reply_seq"`
	Time     time.Time `json:"time"`
}

// AuditPage is a page of audit records, newest first.
type AuditPage struct {
	Records []AuditRecord `json:"records"`
	// NextCursor asks for the next (older) page; empty after the last.
	NextCursor string `json:"next_cursor,omitempty"`
}

// DeadLetters returns a page of dead letters (GET /v1/dlq).
func (c *Client) DeadLetters(ctx context.Context, opts RecordOptions) (DeadLetterPage, error) {
	var out DeadLetterPage
	err := c.do(ctx, http.MethodGet, "/v1/dlq"+opts.query(), nil, &out)
	return out, err
}

// Audit returns a page of audit records (GET /v1/audit).
func (c *Client) Audit(ctx context.Context, opts RecordOptions) (AuditPage, error) {
	var out AuditPage
	err := c.do(ctx, http.MethodGet, "/v1/audit"+opts.query(), nil, &out)
	return out, err
}
