package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/wire"
)

// ErrNotCaptured is returned when no stream captures a published subject:
// the message would otherwise be silently dropped.
var ErrNotCaptured = errors.New("no stream captures the subject")

// ErrNoLeader is returned when the stream that captures a published
// subject had no leader for as long as the publish could wait
// (ConnConfig.ElectionWait, or the caller's deadline).
var ErrNoLeader = errors.New("the stream that captures the subject has no leader")

// Outgoing is one message to publish.
type Outgoing struct {
	Subject string
	MsgID   string // "" disables de-duplication and retries after a timeout
	Value   any
	Header  nats.Header // extra headers; Content-Type here overrides the bus default
	// callTool is the tool of a call request (CallMessage): its consumer
	// is made sure of before the call is published.
	callTool string
	// valid says the constructor validated Value, so that encoding it
	// does not validate it again (an event's JSON data checked twice was a
	// few per cent of the orchestrator's CPU).
	valid bool
}

// validated hides a message's Validate from the encoder, for a message its
// constructor already validated; it encodes exactly as the message does.
type validated struct{ v any }

func (w validated) EncodeMsgpack(enc *msgpack.Encoder) error { return enc.Encode(w.v) }
func (w validated) MarshalJSON() ([]byte, error)             { return json.Marshal(w.v) }

// message is o as a nats.Msg, its data in a buffer of EncodePooled that
// the caller gives back with ReleaseEncoded once the publication is over:
// the client copies a message into its connection's buffer as it sends
// it, so its bytes are free once its publication has its answer (or has
// failed for good), unless the client may still send it again, an
// asynchronous publication whose answer was not seen.
func (b *Bus) message(o Outgoing) (*nats.Msg, *[]byte, error) {
	m := &nats.Msg{Subject: o.Subject, Header: make(nats.Header, len(o.Header)+2)}
	// The values are shared, not copied: a message's header is only read,
	// and Set replaces a value rather than changing it.
	maps.Copy(m.Header, o.Header)
	ct := m.Header.Get(wire.HeaderContentType)
	if ct == "" {
		ct = b.cfg.ContentType
	}
	ct, err := wire.NormalizeContentType(ct)
	if err != nil {
		return nil, nil, err
	}
	m.Header.Set(wire.HeaderContentType, ct)
	v := o.Value
	if o.valid {
		v = validated{o.Value}
	}
	data, buf, err := EncodePooled(v, ct)
	if err != nil {
		return nil, nil, err
	}
	m.Data = data
	if o.MsgID != "" {
		m.Header.Set(wire.HeaderMsgID, o.MsgID)
	}
	return m, buf, nil
}

// encodedBuffers hold encodings whose use ends at a known moment: a
// message under publication, an event's data until its batch is
// published. The encoded event batches and the events' data were the
// largest garbage of a call's events.
var encodedBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledEncoding bounds the buffers kept: one large message must not
// keep its size in the pool.
const maxPooledEncoding = 64 << 10

// EncodePooled is Encode into a buffer from a pool, for bytes whose use
// ends at a known moment: ReleaseEncoded(buf) gives the buffer back, after
// which data must not be read.
func EncodePooled(v any, contentType string) (data []byte, buf *[]byte, err error) {
	buf = encodedBuffers.Get().(*[]byte)
	data, err = wire.AppendEncode((*buf)[:0], v, contentType)
	if err != nil {
		encodedBuffers.Put(buf)
		return nil, nil, err
	}
	*buf = data
	return data, buf, nil
}

// ReleaseEncoded gives back a buffer of EncodePooled; nil is none.
func ReleaseEncoded(buf *[]byte) {
	if buf == nil || cap(*buf) > maxPooledEncoding {
		return
	}
	encodedBuffers.Put(buf)
}

// Publish encodes v (msgpack unless a Content-Type header says JSON),
// publishes it on subject with msgID as Nats-Msg-Id and waits for the
// stream's ack. A publish whose ack times out is sent again with the same
// id, up to ConnConfig.PublishRetries times. ack.Duplicate reports a
// message the stream already had.
func (b *Bus) Publish(ctx context.Context, subject, msgID string, v any, hdr ...nats.Header) (*jetstream.PubAck, error) {
	o := Outgoing{Subject: subject, MsgID: msgID, Value: v}
	switch len(hdr) {
	case 0:
	case 1:
		// message copies it.
		o.Header = hdr[0]
	default:
		o.Header = mergeHeaders(hdr...)
	}
	m, buf, err := b.message(o)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", subject, err)
	}
	ack, err := b.publishMsg(ctx, m)
	ReleaseEncoded(buf)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", subject, err)
	}
	return ack, nil
}

func mergeHeaders(hs ...nats.Header) nats.Header {
	out := nats.Header{}
	addHeaders(out, hs...)
	return out
}

// addHeaders adds the values of hs to h, in their order.
func addHeaders(h nats.Header, hs ...nats.Header) {
	for _, x := range hs {
		for k, vs := range x {
			for _, v := range vs {
				h.Add(k, v)
			}
		}
	}
}

func (b *Bus) publishMsg(ctx context.Context, m *nats.Msg) (*jetstream.PubAck, error) {
	retries := 0
	if m.Header.Get(wire.HeaderMsgID) != "" {
		retries = b.cfg.PublishRetries
	}
	var nl noLeader
	for attempt := 0; ; {
		gctx, release := b.deny.guard(ctx, exactSubject(m.Subject))
		actx, cancel := context.WithTimeout(gctx, b.cfg.PublishTimeout)
		ack, err := b.js.PublishMsg(actx, m)
		cancel()
		derr := denied(gctx)
		release()
		if err == nil {
			return ack, nil
		}
		if derr != nil {
			return nil, derr
		}
		if b.awaitLeader(ctx, m.Subject, err, &nl) {
			continue
		}
		if noStreamTook(err) {
			return nil, nl.failure(err)
		}
		timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
		if !timedOut || ctx.Err() != nil || attempt >= retries {
			return nil, err
		}
		attempt++
		b.logger.WarnContext(ctx, "publish timed out, sending again with the same id",
			slog.String("subject", m.Subject), slog.String("msg_id", m.Header.Get(wire.HeaderMsgID)),
			slog.Int("attempt", attempt+1))
	}
}

// PublishBatch publishes every message asynchronously, then waits for every
// ack; a message whose ack does not come within ConnConfig.PublishTimeout is
// sent again synchronously with the same id. The error joins the failures,
// each naming its index and subject.
func (b *Bus) PublishBatch(ctx context.Context, msgs []Outgoing) error {
	return b.publishBatch(ctx, msgs, nil)
}

// PublishBatchRepeats is PublishBatch, and tells which messages the stream
// acknowledged as repeats of one it holds under the same Nats-Msg-Id
// (stored before, within its duplicate window): repeats[i] for msgs[i].
func (b *Bus) PublishBatchRepeats(ctx context.Context, msgs []Outgoing) ([]bool, error) {
	repeats := make([]bool, len(msgs))
	return repeats, b.publishBatch(ctx, msgs, repeats)
}

// publishBatch is PublishBatch, setting repeats[i] for msgs[i] unless
// repeats is nil (events and replies have no use for it).
func (b *Bus) publishBatch(ctx context.Context, msgs []Outgoing, repeats []bool) error {
	type pending struct {
		i   int
		m   *nats.Msg
		buf *[]byte
		fut jetstream.PubAckFuture
	}
	var errs []error
	var futs []pending
	for i, o := range msgs {
		if o.callTool != "" {
			if err := b.EnsureCallConsumer(ctx, o.callTool); err != nil {
				errs = append(errs, fmt.Errorf("publish batch [%d] %s: %w", i, o.Subject, err))
				continue
			}
		}
		m, buf, err := b.message(o)
		if err != nil {
			errs = append(errs, fmt.Errorf("publish batch [%d] %s: %w", i, o.Subject, err))
			continue
		}
		fut, err := b.js.PublishMsgAsync(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("publish batch [%d] %s: %w", i, o.Subject, err))
			continue
		}
		futs = append(futs, pending{i: i, m: m, buf: buf, fut: fut})
	}
	timer := time.NewTimer(b.cfg.PublishTimeout)
	defer timer.Stop()
	timedOut := false
	for _, p := range futs {
		answered, repeat, err := b.awaitBatchAck(ctx, p.m, p.fut, timer, &timedOut)
		if answered {
			ReleaseEncoded(p.buf)
		}
		if repeats != nil {
			repeats[p.i] = repeat
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("publish batch [%d] %s: %w", p.i, p.m.Subject, err))
		}
	}
	return errors.Join(errs...)
}

// awaitBatchAck waits for the ack of m, published asynchronously with fut,
// until timer fires (timedOut records it for the messages after m), and
// sends m again synchronously if it may (publishBatch). answered says
// whether fut had its answer, after which the client does not send m
// again and its bytes are free; repeat, whether the stream acknowledged m
// as a repeat of one it holds.
func (b *Bus) awaitBatchAck(ctx context.Context, m *nats.Msg, fut jetstream.PubAckFuture, timer *time.Timer, timedOut *bool) (answered, repeat bool, err error) {
	var ack *jetstream.PubAck
	answered = true
	// An answer that is there is taken before the timer, which may have
	// run out while an earlier message was sent again.
	select {
	case ack = <-fut.Ok():
	case err = <-fut.Err():
	default:
		if *timedOut {
			answered, err = false, context.DeadlineExceeded
			break
		}
		select {
		case ack = <-fut.Ok():
		case err = <-fut.Err():
		case <-timer.C:
			*timedOut = true
			answered, err = false, context.DeadlineExceeded
		case <-ctx.Done():
			return false, false, ctx.Err()
		}
	}
	if ack != nil {
		return true, ack.Duplicate, nil
	}
	// No stream took it (not stored: sent again whatever its id, and
	// publishMsg waits for a leader, or says that none captures it), or its
	// ack did not come in time (sent again only with an id, which makes
	// the stream drop it if it was stored after all).
	retryable := noStreamTook(err) || (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout)) && m.Header.Get(wire.HeaderMsgID) != ""
	if retryable && ctx.Err() == nil {
		again := nats.NewMsg(m.Subject)
		again.Header, again.Data = m.Header, m.Data
		// Not counted a repeat: its ack would say so if the first send, of
		// this batch, was stored after all.
		if _, err = b.publishMsg(ctx, again); err == nil {
			return answered, false, nil
		}
	}
	return answered, false, err
}

// idHeaders is the header of a message of a run: its ids, then extra's
// headers, in one map (a message's header was built as three maps, one
// copied into the next).
func idHeaders(runID, conversationID, toolCallID string, extra ...nats.Header) nats.Header {
	h := make(nats.Header, 4)
	if runID != "" {
		h.Set(wire.HeaderRun, runID)
	}
	if conversationID != "" {
		h.Set(wire.HeaderConversation, conversationID)
	}
	if toolCallID != "" {
		h.Set(wire.HeaderCall, toolCallID)
	}
	addHeaders(h, extra...)
	return h
}

// CallMessage is the Outgoing for a call request: subject
// toolgate.call.<tool>, id MsgID(run, call, "call.<attempt>").
func CallMessage(r wire.CallRequest, hdr ...nats.Header) (Outgoing, error) {
	if err := r.Validate(); err != nil {
		return Outgoing{}, err
	}
	subj, err := wire.CallSubject(r.ToolName)
	if err != nil {
		return Outgoing{}, err
	}
	return Outgoing{
		Subject:  subj,
		MsgID:    r.MsgID(),
		Value:    r,
		Header:   idHeaders(r.RunID, r.ConversationID, r.ToolCallID, hdr...),
		callTool: r.ToolName,
		valid:    true,
	}, nil
}

// ApprovalMessage is the Outgoing for an approval request: subject
// toolgate.approval.<tool>, id MsgID(run, call, "approval.<attempt>").
func ApprovalMessage(r wire.ApprovalRequest, hdr ...nats.Header) (Outgoing, error) {
	if err := r.Validate(); err != nil {
		return Outgoing{}, err
	}
	subj, err := wire.ApprovalSubject(r.ToolName)
	if err != nil {
		return Outgoing{}, err
	}
	return Outgoing{
		Subject: subj,
		MsgID:   r.MsgID(),
		Value:   r,
		Header:  idHeaders(r.RunID, r.ConversationID, r.ToolCallID, hdr...),
		valid:   true,
	}, nil
}

// CallReplyMessage is the Outgoing for a worker's result: subject
// toolgate.reply.<run>.call, id CallReply.MsgID.
func CallReplyMessage(r wire.CallReply, hdr ...nats.Header) (Outgoing, error) {
	if err := r.Validate(); err != nil {
		return Outgoing{}, err
	}
	subj, err := wire.CallReplySubject(r.RunID)
	if err != nil {
		return Outgoing{}, err
	}
	return Outgoing{
		Subject: subj,
		MsgID:   r.MsgID(),
		Value:   r,
		Header:  idHeaders(r.RunID, "", r.ToolCallID, hdr...),
		valid:   true,
	}, nil
}

// DecisionMessage is the Outgoing for an approver's decision: subject
// toolgate.reply.<run>.approval, id Decision.MsgID.
func DecisionMessage(d wire.Decision, hdr ...nats.Header) (Outgoing, error) {
	if err := d.Validate(); err != nil {
		return Outgoing{}, err
	}
	subj, err := wire.DecisionSubject(d.RunID)
	if err != nil {
		return Outgoing{}, err
	}
	id, err := d.MsgID()
	if err != nil {
		return Outgoing{}, err
	}
	return Outgoing{
		Subject: subj,
		MsgID:   id,
		Value:   d,
		Header:  idHeaders(d.RunID, "", d.ToolCallID, hdr...),
		valid:   true,
	}, nil
}

// EventMessage is the Outgoing for an event on toolgate.event.<conversation>.
// Events carry no natural id, so they are not de-duplicated unless msgID
// is given.
func EventMessage(e wire.Event, msgID string, hdr ...nats.Header) (Outgoing, error) {
	if err := e.Validate(); err != nil {
		return Outgoing{}, err
	}
	return eventMessage(e, msgID, hdr...)
}

func eventMessage(e wire.Event, msgID string, hdr ...nats.Header) (Outgoing, error) {
	subj, err := wire.EventSubject(e.ConversationID)
	if err != nil {
		return Outgoing{}, err
	}
	return Outgoing{
		Subject: subj,
		MsgID:   msgID,
		Value:   e,
		Header:  idHeaders(e.RunID, e.ConversationID, e.ToolCallID, hdr...),
		valid:   true,
	}, nil
}

// EventBatchMessage is the Outgoing for several events of one
// conversation, in order, as one message on toolgate.event.<conversation>
// (marked with HeaderEventBatch); one event is sent as EventMessage sends
// it.
func EventBatchMessage(events []wire.Event) (Outgoing, error) {
	if err := (wire.EventBatch{Events: events}).Validate(); err != nil {
		return Outgoing{}, err
	}
	return eventBatchMessage(events)
}

// EncodedEventBatchMessage is EventBatchMessage for events whose data
// encoding/json produced: their data is not scanned again
// (Event.ValidateEncoded).
func EncodedEventBatchMessage(events []wire.Event) (Outgoing, error) {
	if err := (wire.EventBatch{Events: events}).ValidateEncoded(); err != nil {
		return Outgoing{}, err
	}
	return eventBatchMessage(events)
}

// eventBatchMessage is the Outgoing of events, which are valid.
func eventBatchMessage(events []wire.Event) (Outgoing, error) {
	if len(events) == 1 {
		return eventMessage(events[0], "")
	}
	batch := wire.EventBatch{Events: events}
	subj, err := wire.EventSubject(events[0].ConversationID)
	if err != nil {
		return Outgoing{}, err
	}
	hdr := idHeaders("", events[0].ConversationID, "")
	hdr.Set(wire.HeaderEventBatch, strconv.Itoa(len(events)))
	return Outgoing{Subject: subj, Value: batch, Header: hdr, valid: true}, nil
}

// DecodeEvents decodes a message of TOOLGATE_EVENTS: one event, or the
// events of an EventBatch (HeaderEventBatch).
func DecodeEvents(data []byte, hdr nats.Header) ([]wire.Event, error) {
	return wire.DecodeEvents(data, hdr.Get(wire.HeaderContentType), hdr.Get(wire.HeaderEventBatch) != "")
}

func (b *Bus) publishOutgoing(ctx context.Context, what string, o Outgoing, err error) (*jetstream.PubAck, error) {
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", what, err)
	}
	if o.callTool != "" {
		if err := b.EnsureCallConsumer(ctx, o.callTool); err != nil {
			return nil, fmt.Errorf("publish %s: %w", what, err)
		}
	}
	m, buf, err := b.message(o)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", what, err)
	}
	ack, err := b.publishMsg(ctx, m)
	ReleaseEncoded(buf)
	if err != nil {
		return nil, fmt.Errorf("publish %s %s: %w", what, o.MsgID, err)
	}
	return ack, nil
}

// PublishCall publishes a call request for the tool's workers.
func (b *Bus) PublishCall(ctx context.Context, r wire.CallRequest, hdr ...nats.Header) (*jetstream.PubAck, error) {
	o, err := CallMessage(r, hdr...)
	return b.publishOutgoing(ctx, "call", o, err)
}

// PublishApproval publishes an approval request for every approver.
func (b *Bus) PublishApproval(ctx context.Context, r wire.ApprovalRequest, hdr ...nats.Header) (*jetstream.PubAck, error) {
	o, err := ApprovalMessage(r, hdr...)
	return b.publishOutgoing(ctx, "approval", o, err)
}

// PublishCallReply publishes a worker's result.
func (b *Bus) PublishCallReply(ctx context.Context, r wire.CallReply, hdr ...nats.Header) (*jetstream.PubAck, error) {
	o, err := CallReplyMessage(r, hdr...)
	return b.publishOutgoing(ctx, "call reply", o, err)
}

// PublishDecision publishes an approver's decision.
func (b *Bus) PublishDecision(ctx context.Context, d wire.Decision, hdr ...nats.Header) (*jetstream.PubAck, error) {
	o, err := DecisionMessage(d, hdr...)
	return b.publishOutgoing(ctx, "decision", o, err)
}

// PublishEvent publishes a conversation event (not de-duplicated).
func (b *Bus) PublishEvent(ctx context.Context, e wire.Event, hdr ...nats.Header) (*jetstream.PubAck, error) {
	o, err := EventMessage(e, "", hdr...)
	return b.publishOutgoing(ctx, "event", o, err)
}

// PublishAudit records v (a settled decision, a refused reply…) on
// toolgate.audit.<run>; msgID de-duplicates a record written twice.
func (b *Bus) PublishAudit(ctx context.Context, runID, msgID string, v any, hdr ...nats.Header) (*jetstream.PubAck, error) {
	subj, err := wire.AuditSubject(runID)
	if err != nil {
		return nil, fmt.Errorf("publish audit: %w", err)
	}
	return b.Publish(ctx, subj, msgID, v, idHeaders(runID, "", "", hdr...))
}
