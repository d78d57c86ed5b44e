package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A log is the messages of one subject of a stream read in order (the
// orchestrator keeps each conversation as one). ReadLog reads them with
// batched direct gets (ADR-31: a request for up to n messages of a subject
// from a sequence, answered by that many messages and an end-of-batch
// marker), so that a log of a few records costs one round trip.

// LogMsg is one message of a log.
type LogMsg struct {
	Sequence uint64
	Header   nats.Header
	Data     []byte
	Time     time.Time
	// Pending is how many messages of the subject follow this one.
	Pending uint64
}

// logBatch is how many messages one direct get asks for. The replies are
// taken from a channel of this size (and one more for the end marker), so
// none can be dropped.
const logBatch = 64

// errLogEnd ends a batch: no more messages of the subject.
var errLogEnd = errors.New("end of log")

// ReadLog calls fn with each message of subject in stream after sequence
// after, in order, and returns the sequence of the last one (after when there
// are none). The stream must allow direct gets.
func (b *Bus) ReadLog(ctx context.Context, stream, subject string, after uint64, fn func(LogMsg) error) (uint64, error) {
	last := after
	for {
		n, more, err := b.readLogBatch(ctx, stream, subject, last, func(m LogMsg) error {
			last = m.Sequence
			return fn(m)
		})
		if err != nil {
			return last, fmt.Errorf("read %s of %s: %w", subject, stream, err)
		}
		if n < logBatch || !more {
			return last, nil
		}
	}
}

// readLogBatch reads one batch; it reports how many messages it read and
// whether more follow.
func (b *Bus) readLogBatch(ctx context.Context, stream, subject string, after uint64, fn func(LogMsg) error) (int, bool, error) {
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
		Batch   int    `json:"batch"`
	}{after + 1, subject, logBatch})
	if err != nil {
		return 0, false, err
	}
	inbox := b.nc.NewRespInbox()
	ch := make(chan *nats.Msg, logBatch+1)
	sub, err := b.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return 0, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	prefix := b.js.Options().APIPrefix
	if prefix == "" {
		prefix = "$JS.API."
	}
	if err := b.nc.PublishRequest(prefix+"DIRECT.GET."+stream, inbox, req); err != nil {
		return 0, false, err
	}
	timer := time.NewTimer(readLogStall)
	defer timer.Stop()
	n, more := 0, false
	for {
		select {
		case <-ctx.Done():
			return n, false, ctx.Err()
		case <-timer.C:
			return n, false, fmt.Errorf("no answer to a direct get for %s", readLogStall)
		case m := <-ch:
			timer.Reset(readLogStall)
			lm, err := logMsgOf(m)
			if errors.Is(err, errLogEnd) {
				return n, more, nil
			}
			if err != nil {
				return n, false, err
			}
			n++
			more = lm.Pending > 0
			if err := fn(lm); err != nil {
				return n, false, err
			}
		}
	}
}

// readLogStall bounds the wait for each message of a batch.
var readLogStall = 10 * time.Second

// logMsgOf decodes a direct get's reply: a message, the end-of-batch marker
// or "no messages" (errLogEnd), or an error status.
func logMsgOf(m *nats.Msg) (LogMsg, error) {
	if len(m.Data) == 0 {
		switch status := m.Header.Get("Status"); status {
		case "204", "404":
			return LogMsg{}, errLogEnd
		case "":
		default:
			return LogMsg{}, fmt.Errorf("direct get: %s %s", status, m.Header.Get("Description"))
		}
	}
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return LogMsg{}, fmt.Errorf("direct get: bad %s header %q", jetstream.SequenceHeader, m.Header.Get(jetstream.SequenceHeader))
	}
	pending, err := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
	if err != nil {
		return LogMsg{}, errors.New("direct get: no Nats-Num-Pending header: the server does not do batched direct gets (nats-server 2.11 or later does)")
	}
	t, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
	return LogMsg{Sequence: seq, Header: m.Header, Data: m.Data, Time: t, Pending: pending}, nil
}
