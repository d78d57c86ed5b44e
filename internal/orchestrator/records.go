package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/wire"
)

// An operator reads the dead letters (TOOLGATE_DLQ) and the audit records
// (TOOLGATE_AUDIT) newest first, a page at a time: what went wrong lately
// is what is looked for, and both streams only grow at their end.

// RecordQuery selects a page of dead letters or audit records, newest
// first.
type RecordQuery struct {
	// ConversationID keeps only the records of that conversation; empty
	// keeps all.
	ConversationID string
	// ToolCallID keeps only the records of that tool call; empty keeps all.
	ToolCallID string
	// Since keeps only the records stored at or after it; zero keeps all.
	Since time.Time
	// Limit is the page size: DefaultListLimit when 0, at most
	// MaxListLimit.
	Limit int
	// Cursor is the previous page's NextCursor; empty starts at the newest
	// record.
	Cursor string
}

// MaxRecordScan bounds the records one page reads: a filter that few
// records pass gives a short page, even an empty one, with a cursor to go
// on from, rather than a request that reads the whole stream.
const MaxRecordScan = 4096

// DeadLetter is a message that could not be handled, as TOOLGATE_DLQ keeps
// it (docs/protocol.md, "Dead letters").
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

// AuditEntry is an audit record with its place in TOOLGATE_AUDIT.
type AuditEntry struct {
	Seq uint64 `json:"seq"`
	AuditRecord
}

// AuditPage is a page of audit records, newest first.
type AuditPage struct {
	Records []AuditEntry `json:"records"`
	// NextCursor asks for the next (older) page; empty after the last.
	NextCursor string `json:"next_cursor,omitempty"`
}

// DeadLetters returns a page of dead letters, newest first.
func (o *Orchestrator) DeadLetters(ctx context.Context, q RecordQuery) (DeadLetterPage, error) {
	page := DeadLetterPage{DeadLetters: []DeadLetter{}}
	next, err := o.scanBack(ctx, wire.StreamDLQ, &q, func(raw *jetstream.RawStreamMsg) bool {
		dl := deadLetterOf(raw)
		if !q.keeps(dl.ConversationID, dl.ToolCallID) {
			return false
		}
		page.DeadLetters = append(page.DeadLetters, dl)
		return true
	})
	if err != nil {
		return DeadLetterPage{}, fmt.Errorf("read dead letters: %w", err)
	}
	page.NextCursor = next
	return page, nil
}

// AuditRecords returns a page of audit records, newest first. A record
// that cannot be decoded is shown with its place and a reason rather than
// hidden: an audit trail with a hole must say so.
func (o *Orchestrator) AuditRecords(ctx context.Context, q RecordQuery) (AuditPage, error) {
	page := AuditPage{Records: []AuditEntry{}}
	next, err := o.scanBack(ctx, wire.StreamAudit, &q, func(raw *jetstream.RawStreamMsg) bool {
		var rec AuditRecord
		if err := wire.Decode(raw.Data, raw.Header.Get(wire.HeaderContentType), &rec); err != nil {
			rec = AuditRecord{Verdict: "unreadable", Reason: err.Error(), RunID: raw.Header.Get(wire.HeaderRun), Time: raw.Time.UTC()}
		}
		if rec.ConversationID == "" {
			rec.ConversationID = raw.Header.Get(wire.HeaderConversation)
		}
		if rec.ToolCallID == "" {
			rec.ToolCallID = raw.Header.Get(wire.HeaderCall)
		}
		if !q.keeps(rec.ConversationID, rec.ToolCallID) {
			return false
		}
		page.Records = append(page.Records, AuditEntry{Seq: raw.Sequence, AuditRecord: rec})
		return true
	})
	if err != nil {
		return AuditPage{}, fmt.Errorf("read audit records: %w", err)
	}
	page.NextCursor = next
	return page, nil
}

func (q *RecordQuery) keeps(convID, callID string) bool {
	return (q.ConversationID == "" || q.ConversationID == convID) && (q.ToolCallID == "" || q.ToolCallID == callID)
}

// check validates q and sets its default limit; it returns the sequence
// the page starts before (0: from the newest).
func (q *RecordQuery) check() (uint64, error) {
	if q.Limit < 0 || q.Limit > MaxListLimit {
		return 0, &BadRequestError{fmt.Sprintf("limit: %d is not between 1 and %d", q.Limit, MaxListLimit)}
	}
	if q.Limit == 0 {
		q.Limit = DefaultListLimit
	}
	if q.Cursor == "" {
		return 0, nil
	}
	before, err := strconv.ParseUint(q.Cursor, 10, 64)
	if err != nil || before == 0 {
		return 0, &BadRequestError{fmt.Sprintf("cursor: %q is not a cursor a page gave", q.Cursor)}
	}
	return before, nil
}

// scanBack reads stream from its newest message (or the one before the
// cursor) towards its oldest, calling keep with each until q.Limit were
// kept, MaxRecordScan were read, or a message older than q.Since is met,
// and returns the cursor of the next page ("" when there is none). The
// messages are read one by one: a page stops early, and the streams keep
// messages of every size, so a consumer's batches would mostly carry what
// is not shown.
func (o *Orchestrator) scanBack(ctx context.Context, stream string, q *RecordQuery, keep func(*jetstream.RawStreamMsg) bool) (string, error) {
	before, err := q.check()
	if err != nil {
		return "", err
	}
	st, err := o.bus.JetStream().Stream(ctx, stream)
	if err != nil {
		return "", fmt.Errorf("stream %s: %w", stream, err)
	}
	state := st.CachedInfo().State
	if state.Msgs == 0 {
		return "", nil
	}
	seq := state.LastSeq
	if before != 0 {
		seq = min(seq, before-1)
	}
	kept, read := 0, 0
	for ; seq >= max(state.FirstSeq, 1); seq-- {
		if kept == q.Limit || read == MaxRecordScan {
			return strconv.FormatUint(seq+1, 10), nil
		}
		raw, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			// Removed meanwhile (aged out, or deleted).
			continue
		}
		if err != nil {
			return "", fmt.Errorf("%s #%d: %w", stream, seq, err)
		}
		read++
		if !q.Since.IsZero() && raw.Time.Before(q.Since) {
			// Stored in time order: everything older is older still.
			return "", nil
		}
		if keep(raw) {
			kept++
		}
	}
	return "", nil
}

// deadLetterOf reads a dead letter's headers and body.
func deadLetterOf(raw *jetstream.RawStreamMsg) DeadLetter {
	h := raw.Header
	dl := DeadLetter{
		Seq: raw.Sequence, Time: raw.Time.UTC(),
		Reason: h.Get(wire.HeaderDLQReason), Subject: h.Get(wire.HeaderDLQSubject),
		Stream: h.Get(wire.HeaderDLQStream), Consumer: h.Get(wire.HeaderDLQConsumer),
		ConversationID: h.Get(wire.HeaderConversation), RunID: h.Get(wire.HeaderRun), ToolCallID: h.Get(wire.HeaderCall),
	}
	if n := len(wire.PrefixDLQ) + 1; len(raw.Subject) > n {
		dl.Kind = raw.Subject[n:]
	}
	dl.StreamSeq, _ = strconv.ParseUint(h.Get(wire.HeaderDLQSeq), 10, 64)
	dl.Truncated, _ = strconv.Atoi(h.Get(wire.HeaderDLQTruncated))
	dl.Body, dl.BodyBase64 = bodyJSON(raw.Data, h)
	if dl.Body != nil && (dl.ConversationID == "" || dl.RunID == "" || dl.ToolCallID == "") {
		// A reply or a call says whose it is in its body too, and a
		// foreign publisher may have left the headers out.
		var ids struct {
			ConversationID string `json:"conversation_id"`
			RunID          string `json:"run_id"`
			ToolCallID     string `json:"tool_call_id"`
		}
		if json.Unmarshal(dl.Body, &ids) == nil {
			dl.ConversationID = cmpOr(dl.ConversationID, ids.ConversationID)
			dl.RunID = cmpOr(dl.RunID, ids.RunID)
			dl.ToolCallID = cmpOr(dl.ToolCallID, ids.ToolCallID)
		}
	}
	return dl
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// bodyJSON is a body as JSON when it decodes under its content type (a
// truncated one does not), else its bytes.
func bodyJSON(data []byte, h nats.Header) (json.RawMessage, []byte) {
	if len(data) == 0 {
		return nil, nil
	}
	var v any
	if err := wire.Decode(data, h.Get(wire.HeaderContentType), &v); err == nil {
		if b, err := json.Marshal(jsonable(v)); err == nil {
			return b, nil
		}
	}
	return nil, data
}

// jsonable turns what msgpack decodes into (maps keyed by any value) into
// what encoding/json can encode.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
		return x
	}
	return v
}
