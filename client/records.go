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

// DeadLetter is a message that could not be handled, as GET /v1/dlq shows
// it.
type DeadLetter struct {
	Seq            uint64          `json:"seq"`
	Time           time.Time       `json:"time"`
	Kind           string          `json:"kind"`
	Reason         string          `json:"reason"`
	Subject        string          `json:"subject"`
	Stream         string          `json:"stream"`
	StreamSeq      uint64          `json:"stream_seq"`
	Consumer       string          `json:"consumer,omitempty"`
	ConversationID string          `json:"conversation_id,omitempty"`
	RunID          string          `json:"run_id,omitempty"`
	ToolCallID     string          `json:"tool_call_id,omitempty"`
	Truncated      int             `json:"truncated,omitempty"`
	Body           json.RawMessage `json:"body,omitempty"`
	BodyBase64     []byte          `json:"body_base64,omitempty"`
}

// DeadLetterPage is a page of dead letters, newest first.
type DeadLetterPage struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	// NextCursor asks for the next (older) page; empty after the last.
	NextCursor string `json:"next_cursor,omitempty"`
}

// AuditRecord is an entry of the audit stream, as GET /v1/audit shows it.
type AuditRecord struct {
	Seq            uint64          `json:"seq"`
	Kind           string          `json:"kind"`
	Verdict        string          `json:"verdict"`
	Reason         string          `json:"reason,omitempty"`
	ConversationID string          `json:"conversation_id,omitempty"`
	RunID          string          `json:"run_id"`
	ToolCallID     string          `json:"tool_call_id"`
	ToolName       string          `json:"tool_name,omitempty"`
	ApproverID     string          `json:"approver_id,omitempty"`
	Approved       *bool           `json:"approved,omitempty"`
	Signed         bool            `json:"signed,omitempty"`
	ArgsDigest     string          `json:"args_digest,omitempty"`
	OverrideArgs   json.RawMessage `json:"override_args,omitempty"`
	Message        string          `json:"message,omitempty"`
	WorkerID       string          `json:"worker_id,omitempty"`
	ReplySeq       uint64          `json:"reply_seq"`
	Time           time.Time       `json:"time"`
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
