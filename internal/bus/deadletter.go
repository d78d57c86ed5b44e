package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/wire"
)

// Dead-letter kinds (package wire).
const (
	DLQDecode        = wire.DLQDecode
	DLQInvalid       = wire.DLQInvalid
	DLQHandler       = wire.DLQHandler
	DLQMaxDeliveries = wire.DLQMaxDeliveries
)

// maxReasonLen keeps reasons within a header line and a term reason.
const maxReasonLen = 512

func truncateReason(s string) string {
	if len(s) <= maxReasonLen {
		return s
	}
	s = s[:maxReasonLen]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// deadLetter publishes a copy of a stored message on toolgate.dlq.<kind>
// with its original subject and headers plus the reason. The id is derived
// from the original stream and sequence, so a copy made twice is stored once.
func (b *Bus) deadLetter(ctx context.Context, kind, reason, stream, consumer string, seq uint64, subject string, hdr nats.Header, data []byte) error {
	subj, err := wire.DLQSubject(kind)
	if err != nil {
		return err
	}
	m := nats.NewMsg(subj)
	for k, vs := range hdr {
		if k == wire.HeaderMsgID || k == "Nats-Expected-Stream" || k == "Nats-Expected-Last-Sequence" ||
			k == "Nats-Expected-Last-Subject-Sequence" || k == "Nats-Expected-Last-Msg-Id" || k == "Nats-TTL" {
			continue
		}
		for _, v := range vs {
			m.Header.Add(k, v)
		}
	}
	if id := hdr.Get(wire.HeaderMsgID); id != "" {
		m.Header.Set("Toolgate-DLQ-Msg-Id", id)
	}
	m.Header.Set(wire.HeaderDLQReason, sanitizeHeader(truncateReason(reason)))
	m.Header.Set(wire.HeaderDLQSubject, WireReplySubject(subject))
	m.Header.Set(wire.HeaderDLQStream, stream)
	m.Header.Set(wire.HeaderDLQSeq, strconv.FormatUint(seq, 10))
	if consumer != "" {
		m.Header.Set(wire.HeaderDLQConsumer, consumer)
	}
	m.Header.Set(wire.HeaderMsgID, "dlq/"+stream+"/"+strconv.FormatUint(seq, 10))
	m.Data = data
	_, err = b.publishMsg(ctx, m)
	if errors.Is(err, nats.ErrMaxPayload) {
		// A message stored just under the max payload is over it once the
		// copy's headers are added: keep what fits and say so, rather than
		// leave it to be redelivered, and fail to be copied, forever.
		keep := max(int(b.nc.MaxPayload())-headerSize(m.Header)-256, 0)
		m.Header.Set(wire.HeaderDLQTruncated, strconv.Itoa(len(data)))
		m.Data = data[:min(keep, len(data))]
		_, err = b.publishMsg(ctx, m)
	}
	if err != nil {
		return fmt.Errorf("dead letter %s #%d: %w", stream, seq, err)
	}
	return nil
}

// headerSize is about what h takes on the wire.
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

func sanitizeHeader(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}

// DeadLetterMsg copies a message delivered by a consumer of the caller's
// own to the DLQ with kind and reason, and terminates it: for consumers
// that do not go through the bus's own (ConsumeCalls and the like), which
// dead-letter what they cannot handle by themselves. A message that cannot
// be handled is never dropped.
func (b *Bus) DeadLetterMsg(ctx context.Context, m jetstream.Msg, kind, reason string) error {
	return b.deadLetterMsg(ctx, m, kind, reason)
}

// deadLetterMsg copies a delivered message to the DLQ and terminates it.
func (b *Bus) deadLetterMsg(ctx context.Context, m jetstream.Msg, kind, reason string) error {
	meta, err := m.Metadata()
	if err != nil {
		return fmt.Errorf("dead letter: %w", err)
	}
	if err := b.deadLetter(ctx, kind, reason, meta.Stream, meta.Consumer, meta.Sequence.Stream, m.Subject(), m.Headers(), m.Data()); err != nil {
		return err
	}
	if err := m.TermWithReason(sanitizeHeader(truncateReason(kind + ": " + reason))); err != nil {
		return fmt.Errorf("dead letter: term: %w", err)
	}
	return nil
}

// DeadLetter is a message read back from TOOLGATE_DLQ.
type DeadLetter struct {
	Kind      string // DLQDecode, DLQInvalid, DLQHandler, DLQMaxDeliveries
	Reason    string
	Subject   string // the original subject
	Stream    string // the original stream
	StreamSeq uint64 // the original sequence
	Consumer  string
	Header    nats.Header // the original headers plus the Toolgate-DLQ-* ones
	Data      []byte
	Seq       uint64 // the sequence in TOOLGATE_DLQ
	Time      time.Time
}

// GetDeadLetter reads dead letter number seq of TOOLGATE_DLQ.
func (b *Bus) GetDeadLetter(ctx context.Context, seq uint64) (DeadLetter, error) {
	st, err := b.js.Stream(ctx, wire.StreamDLQ)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("get dead letter: %w", errNotSetUp(err))
	}
	raw, err := st.GetMsg(ctx, seq)
	if err != nil {
		return DeadLetter{}, fmt.Errorf("get dead letter %d: %w", seq, err)
	}
	dl := DeadLetter{
		Reason:   raw.Header.Get(wire.HeaderDLQReason),
		Subject:  raw.Header.Get(wire.HeaderDLQSubject),
		Stream:   raw.Header.Get(wire.HeaderDLQStream),
		Consumer: raw.Header.Get(wire.HeaderDLQConsumer),
		Header:   raw.Header,
		Data:     raw.Data,
		Seq:      raw.Sequence,
		Time:     raw.Time,
	}
	if n := len(wire.PrefixDLQ) + 1; len(raw.Subject) > n {
		dl.Kind = raw.Subject[n:]
	}
	dl.StreamSeq, _ = strconv.ParseUint(raw.Header.Get(wire.HeaderDLQSeq), 10, 64)
	return dl, nil
}

// maxDeliveriesAdvisory is io.nats.jetstream.advisory.v1.max_deliver.
type maxDeliveriesAdvisory struct {
	Type       string `json:"type"`
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// MaxDeliveriesConfig configures HandleMaxDeliveries.
type MaxDeliveriesConfig struct {
	// Durable consumer of TOOLGATE_ADVISORIES, shared by orchestrator
	// replicas. Defaults to "max_deliveries".
	Durable string
	// WorkerID is set on the Failed replies. Defaults to "toolgate".
	WorkerID string
}

// HandleMaxDeliveries consumes the MAX_DELIVERIES advisories of toolgate's
// consumers (captured durably in TOOLGATE_ADVISORIES, so none is lost while
// no orchestrator runs). For a call it copies the message to the DLQ,
// publishes a Failed reply ("exhausted N deliveries") with the id a worker's
// result would have, so the run does not hang and a late real result is
// dropped as a duplicate, and deletes the call from the work queue. For an
// approval request or a reply it copies the message to the DLQ and leaves
// the original (other approvers may still need it).
func (b *Bus) HandleMaxDeliveries(ctx context.Context, cfg MaxDeliveriesConfig) (*Subscription, error) {
	if cfg.Durable == "" {
		cfg.Durable = "max_deliveries"
	}
	if cfg.WorkerID == "" {
		cfg.WorkerID = "toolgate"
	}
	if err := wire.ValidateToken("durable name", cfg.Durable); err != nil {
		return nil, fmt.Errorf("handle max deliveries: %w", err)
	}
	ccfg := ConsumeConfig{MaxDeliver: -1}.withDefaults(16)
	cc := jetstream.ConsumerConfig{Durable: cfg.Durable, Description: "dead-letters messages that exhausted MaxDeliver"}
	decode := func(m jetstream.Msg, _ string) (maxDeliveriesAdvisory, error) {
		var a maxDeliveriesAdvisory
		if err := json.Unmarshal(m.Data(), &a); err != nil {
			return a, &wire.DecodeError{ContentType: wire.ContentTypeJSON, Err: err}
		}
		if a.Stream == "" || a.StreamSeq == 0 {
			return a, &wire.ValidationError{Message: "max deliveries advisory", Field: "stream_seq", Reason: "is missing"}
		}
		return a, nil
	}
	h := HandlerFunc[maxDeliveriesAdvisory](func(ctx context.Context, d *Delivery[maxDeliveriesAdvisory]) error {
		return b.handleMaxDeliveries(ctx, cfg, d.Msg)
	})
	s, err := consume(ctx, b, wire.StreamAdvisories, cc, ccfg, decode, Handler[maxDeliveriesAdvisory](h))
	if err != nil {
		return nil, fmt.Errorf("handle max deliveries: %w", err)
	}
	return s, nil
}

func (b *Bus) handleMaxDeliveries(ctx context.Context, cfg MaxDeliveriesConfig, a maxDeliveriesAdvisory) error {
	st, err := b.js.Stream(ctx, a.Stream)
	if err != nil {
		return fmt.Errorf("max deliveries %s #%d: %w", a.Stream, a.StreamSeq, err)
	}
	// From the leader: the calls stream allows direct gets, and a replica
	// behind it may still hold a call acked at the last moment.
	raw, ok, err := b.leaderMsg(ctx, a.Stream, a.StreamSeq, "")
	if err != nil {
		return fmt.Errorf("max deliveries %s #%d: %w", a.Stream, a.StreamSeq, err)
	}
	if !ok {
		// Already handled (or acked at the last moment, or aged out).
		return nil
	}
	reason := fmt.Sprintf("exhausted %d deliveries", a.Deliveries)
	if err := b.deadLetter(ctx, DLQMaxDeliveries, reason, a.Stream, a.Consumer, a.StreamSeq, raw.Subject, raw.Header, raw.Data); err != nil {
		return err
	}
	b.logger.WarnContext(ctx, "message exhausted its deliveries",
		slog.String("stream", a.Stream), slog.String("consumer", a.Consumer),
		slog.Uint64("stream_seq", a.StreamSeq), slog.Uint64("deliveries", a.Deliveries))
	if a.Stream != wire.StreamCalls {
		return nil
	}
	var req wire.CallRequest
	if err := wire.Decode(raw.Data, raw.Header.Get(wire.HeaderContentType), &req); err == nil {
		_, err := b.PublishCallReply(ctx, wire.CallReply{
			RunID:      req.RunID,
			ToolCallID: req.ToolCallID,
			Outcome:    wire.OutcomeFailed,
			Message:    reason,
			WorkerID:   cfg.WorkerID,
		}, nats.Header{wire.HeaderConversation: []string{req.ConversationID}})
		if err != nil {
			return fmt.Errorf("max deliveries %s #%d: failed reply: %w", a.Stream, a.StreamSeq, err)
		}
	}
	if err := st.DeleteMsg(ctx, a.StreamSeq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("max deliveries %s #%d: delete: %w", a.Stream, a.StreamSeq, err)
	}
	return nil
}
