package bus

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// A log is the messages of one subject of a stream read in order (the
// orchestrator keeps each conversation as one). ReadLog reads them with
// batched direct gets (ADR-31: a request for up to n messages of a subject
// from a sequence, answered by that many messages and an end-of-batch
// marker), so that a log of a few records costs one round trip.

// LogMsg is one message of a log.
type LogMsg struct {
	// Subject is set by a get from the stream's leader (leaderMsg).
	Subject  string
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
// are none). A message appended in parts comes whole, with the sequence and
// headers of its last part. The stream must allow direct gets. A log read
// from its start goes by its messages' sequences when it can
// (readLogChain), which spares the server a scan.
func (b *Bus) ReadLog(ctx context.Context, stream, subject string, after uint64, fn func(LogMsg) error) (uint64, error) {
	last := after
	if after == 0 {
		msgs, ok, err := b.readLogChain(ctx, stream, subject)
		if errors.Is(err, errNoLastMsg) {
			return b.readEmptyLog(ctx, stream, subject, fn)
		}
		if err != nil {
			return 0, fmt.Errorf("read %s of %s: %w", subject, stream, err)
		}
		if ok {
			for _, m := range msgs {
				last = m.Sequence
				if err := fn(m); err != nil {
					return last, fmt.Errorf("read %s of %s: %w", subject, stream, err)
				}
			}
			return last, nil
		}
	}
	return b.readLogFrom(ctx, stream, subject, after, nil, fn)
}

// readEmptyLog is ReadLog of a log the server has no last message of:
// empty (a new conversation's, as every start with an id of the caller's
// checks) or every message of it damaged, which the server answers alike.
// A direct get by the subject's index tells them apart (logHasNone), else
// its count, at once, without the batched read by subject first (which
// would answer "not found" too): two direct gets for an empty log, not two
// and two stream-info requests. A count that is not zero is read by
// subject, which finds a first message that came since, or reports the log
// unreadable.
func (b *Bus) readEmptyLog(ctx context.Context, stream, subject string, fn func(LogMsg) error) (uint64, error) {
	if b.logHasNone(ctx, stream, subject) {
		return 0, nil
	}
	unreadable := b.unreadableLog(ctx, stream, subject)
	if unreadable == nil {
		return 0, nil
	}
	if _, ok := errors.AsType[*LogUnreadableError](unreadable); !ok {
		return 0, unreadable
	}
	return b.readLogFrom(ctx, stream, subject, 0, unreadable, fn)
}

// logHasNone is true when the server answers a direct get of the last
// message of subject by its index (multi_last) with "no results": the
// index holds no message of it, where one it cannot load is answered "not
// found" (nats-server 2.11 and later). Any other answer leaves it to the
// count (unreadableLog): a stream-info request, which costs the server
// several times a direct get (the API's queue, the stream's whole info
// encoded, an advisory) and its answer the reader as much to decode.
func (b *Bus) logHasNone(ctx context.Context, stream, subject string) bool {
	end, err := b.directGetBatch(ctx, stream, directGetRequest{MultiLastFor: []string{subject}}, 1, func(LogMsg) error { return errLogEnd })
	return err == nil && end != nil && end.Header.Get("Status") == "404" && end.Header.Get("Description") == "No Results"
}

// readLogFrom reads the log by subject after sequence after; unreadable,
// if not nil, is an earlier count's that the log is not empty, returned
// if the read finds nothing.
func (b *Bus) readLogFrom(ctx context.Context, stream, subject string, after uint64, unreadable error, fn func(LogMsg) error) (uint64, error) {
	last := after
	var parts []byte
	var missing uint64 // messages the previous batch counted but did not send
	for {
		n, more, unsent, err := b.readLogBatch(ctx, stream, subject, last, func(m LogMsg) error {
			last = m.Sequence
			if p := m.Header.Get(HeaderLogPart); p != "" {
				i, n, ok := partOf(p)
				if !ok {
					return fmt.Errorf("message %d: bad %s header %q", m.Sequence, HeaderLogPart, p)
				}
				if i == 1 {
					parts = parts[:0]
				}
				parts = append(parts, m.Data...)
				if i < n {
					return nil
				}
				m.Data = parts
			}
			return fn(m)
		})
		if err != nil {
			return last, fmt.Errorf("read %s of %s: %w", subject, stream, err)
		}
		// The server counted messages of the subject it did not send:
		// either some were appended while the batch was read (the next
		// batch has them), or it cannot load them (a message whose
		// checksum fails on disk is answered as missing, and the log
		// would silently end before it). A next batch that reads nothing
		// tells the second apart.
		if missing > 0 && n == 0 {
			return last, &LogUnreadableError{Stream: stream, Subject: subject, After: last, Count: missing}
		}
		missing = unsent
		if unsent > 0 {
			continue
		}
		if last == 0 && n == 0 {
			// Nothing at all: a log that is not there, or one whose every
			// message is damaged (a conversation is often one record),
			// which the server answers as empty. Its count tells, unless
			// the log's first message came since the read: a second read
			// tells that apart.
			if unreadable != nil {
				return 0, unreadable
			}
			if unreadable = b.unreadableLog(ctx, stream, subject); unreadable == nil {
				return 0, nil
			}
			if _, ok := errors.AsType[*LogUnreadableError](unreadable); !ok {
				return 0, unreadable
			}
			continue
		}
		if n < logBatch || !more {
			return last, nil
		}
	}
}

// unreadableLog is a *LogUnreadableError if stream counts messages of
// subject, of which a read from the start got none.
func (b *Bus) unreadableLog(ctx context.Context, stream, subject string) error {
	n, err := b.countSubject(ctx, stream, subject)
	if err != nil {
		return fmt.Errorf("read %s of %s: count its messages: %w", subject, stream, err)
	}
	if n > 0 {
		return &LogUnreadableError{Stream: stream, Subject: subject, Count: n}
	}
	return nil
}

// countSubject is how many messages of subject stream holds: one stream
// info request, whose answer is decoded only as far as the count (the
// client's Stream and Info would make two, each decoded whole).
func (b *Bus) countSubject(ctx context.Context, stream, subject string) (uint64, error) {
	req, err := json.Marshal(struct {
		Filter string `json:"subjects_filter"`
	}{subject})
	if err != nil {
		return 0, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.js.Options().DefaultTimeout)
		defer cancel()
	}
	m, err := b.nc.RequestWithContext(ctx, b.apiPrefix()+"STREAM.INFO."+stream, req)
	if err != nil {
		return 0, err
	}
	var info struct {
		Error *jetstream.APIError `json:"error"`
		State struct {
			Subjects map[string]uint64 `json:"subjects"`
		} `json:"state"`
	}
	if err := json.Unmarshal(m.Data, &info); err != nil {
		return 0, err
	}
	switch {
	case info.Error != nil && info.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound:
		return 0, jetstream.ErrStreamNotFound
	case info.Error != nil:
		return 0, info.Error
	}
	return info.State.Subjects[subject], nil
}

// LogUnreadableError says the server holds messages of a log that it cannot
// load (their checksum fails on disk), after message After.
type LogUnreadableError struct {
	Stream, Subject string
	After           uint64
	Count           uint64
}

func (e *LogUnreadableError) Error() string {
	return fmt.Sprintf("the server counts %d more message(s) of %s in %s after sequence %d but cannot load them (damaged on disk?)", e.Count, e.Subject, e.Stream, e.After)
}

// readLogBatch reads one batch; it reports how many messages it read,
// whether more follow, and how many messages the server counted but did
// not send when the batch ended short.
func (b *Bus) readLogBatch(ctx context.Context, stream, subject string, after uint64, fn func(LogMsg) error) (int, bool, uint64, error) {
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
		Batch   int    `json:"batch"`
	}{after + 1, subject, logBatch})
	if err != nil {
		return 0, false, 0, err
	}
	if err := b.logs.open(b.nc); err != nil {
		return 0, false, 0, err
	}
	inbox, ch, done := b.logs.read(logBatch + 1)
	defer done()
	if err := b.nc.PublishRequest(b.apiPrefix()+"DIRECT.GET."+stream, inbox, req); err != nil {
		return 0, false, 0, err
	}
	timer := time.NewTimer(readLogStall)
	defer timer.Stop()
	n, more := 0, false
	for {
		select {
		case <-ctx.Done():
			return n, false, 0, ctx.Err()
		case <-timer.C:
			return n, false, 0, fmt.Errorf("no answer to a direct get for %s", readLogStall)
		case m := <-ch:
			timer.Reset(readLogStall)
			lm, err := logMsgOf(m)
			if errors.Is(err, errLogEnd) {
				var unsent uint64
				if n < logBatch {
					// The end marker carries the count of the subject's
					// messages left after what was sent.
					unsent, _ = strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				}
				return n, more, unsent, nil
			}
			if err != nil {
				return n, false, 0, err
			}
			n++
			more = lm.Pending > 0
			if err := fn(lm); err != nil {
				return n, false, 0, err
			}
		}
	}
}

// apiPrefix is the subject prefix of the JetStream API requests made by
// hand (those the client has no call for).
func (b *Bus) apiPrefix() string {
	if p := b.js.Options().APIPrefix; p != "" {
		return p
	}
	return "$JS.API."
}

func partOf(h string) (i, n int, ok bool) {
	a, b, found := strings.Cut(h, "/")
	i, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	return i, n, found && err1 == nil && err2 == nil && i >= 1 && i <= n
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

// Appending. A message is appended only if the subject's last message is
// at the sequence the writer expects (Nats-Expected-Last-Subject-Sequence;
// 0: the subject has none), which makes the append a compare-and-set. A
// message larger than the connection's max payload goes as an atomic batch
// of parts, all or nothing, each with HeaderLogPart; ReadLog joins them.

// HeaderLogPart numbers the parts of a message appended in parts: "i/n".
const HeaderLogPart = "Toolgate-Part"

// logPartHeadroom is kept below the max payload for a part's headers.
const logPartHeadroom = 1 << 10

// logMaxParts is the server's default limit of messages in an atomic batch.
const logMaxParts = 1000

// ErrLogConflict is returned by AppendLog when the subject's last message
// is not at the expected sequence.
var ErrLogConflict = errors.New("the log moved: its last message is not the one expected")

// LogTooLargeError says a message would not fit in an atomic batch of
// parts; nothing was written.
type LogTooLargeError struct {
	Bytes, Limit int
}

func (e *LogTooLargeError) Error() string {
	return fmt.Sprintf("%d bytes is over the log's limit of %d for one message (%d parts of the max payload)", e.Bytes, e.Limit, logMaxParts)
}

// LogPartSize is the largest message AppendLog writes whole.
func (b *Bus) LogPartSize() int {
	return max(int(b.nc.MaxPayload())-logPartHeadroom, 1024)
}

// AppendLog appends data with header to subject, a subject of stream, if
// the subject's last message is at sequence expect, and returns the new
// last sequence. The append is a compare-and-set: a refused expected
// sequence is ErrLogConflict. header is AppendLog's once given: its own
// headers are added to it.
//
// An append whose answer is lost (a timeout, a connection that dropped,
// a stream leader that went away) may have been stored or not. Each
// message it writes carries an id of this call (HeaderLogAppend); on a
// lost answer, and on a conflict that may be the append's own earlier
// attempt, the subject's first message after expect is read from the
// stream's leader: the append's own is its success, another's a conflict,
// none a reason to send it again (an attempt still in flight is then
// refused by its expected sequence, and found). Within ctx; an outcome
// still unknown when ctx ends is a *LogOutcomeError.
func (b *Bus) AppendLog(ctx context.Context, stream, subject string, expect uint64, data []byte, header nats.Header) (uint64, error) {
	// 80 bits: it is told apart only from the appends to one subject at
	// one expected sequence.
	id := rand.Text()[:16]
	msgs, err := b.logMessages(subject, expect, data, header, id)
	if err != nil {
		return 0, err
	}
	return b.appendLog(ctx, &logAppend{stream: stream, subject: subject, expect: expect, id: id, msgs: msgs}, false)
}

// ResumeAppend goes on with the append whose outcome e left unknown, as
// AppendLog would have had its context not ended: it finds the append in
// the log, or learns that another's came first, or sends it again. A
// caller that acts on what it stored (an event, a launch) learns here
// whether to: a record stored whose append returned an error would
// otherwise leave that undone for good.
func (b *Bus) ResumeAppend(ctx context.Context, e *LogOutcomeError) (uint64, error) {
	if e.append == nil {
		return 0, e
	}
	return b.appendLog(ctx, e.append, true)
}

// logAppend is one append's messages, kept by a LogOutcomeError so that it
// can be followed up.
type logAppend struct {
	stream, subject string
	expect          uint64
	id              string
	msgs            []*nats.Msg
}

// appendLog sends a until its outcome is known; lost says an earlier
// attempt's answer was lost, so that the log may hold it.
func (b *Bus) appendLog(ctx context.Context, a *logAppend, lost bool) (uint64, error) {
	wait := logRetryWait
	var leaderless noLeader
	for {
		seq, err := b.appendAttempt(ctx, a.msgs)
		if err == nil {
			return seq, nil
		}
		// Not stored: sent again while a leader may be elected, unless an
		// earlier attempt's answer was lost, which the log must tell.
		if noStreamTook(err) && !lost {
			if b.awaitLeader(ctx, a.subject, err, &leaderless) {
				continue
			}
			return 0, leaderless.failure(err)
		}
		conflicted := errors.Is(err, ErrLogConflict)
		if conflicted && !lost || !conflicted && !answerLost(err) && !noStreamTook(err) || b.nc.IsClosed() {
			return 0, err
		}
		lost = true
		unknown := &LogOutcomeError{Subject: a.subject, Err: err, append: a}
		if ctx.Err() != nil {
			return 0, unknown
		}
		seq, there, cerr := b.appendedAs(ctx, a.stream, a.subject, a.expect, a.id, len(a.msgs))
		switch {
		case cerr != nil && ctx.Err() != nil:
			return 0, unknown
		case cerr != nil:
			err = cerr
		case there == appendStored:
			b.logger.InfoContext(ctx, "append's answer lost; found in the log",
				slog.String("subject", a.subject), slog.Uint64("seq", seq), slog.String("append_id", a.id))
			return seq, nil
		case there == appendOther:
			return 0, fmt.Errorf("%w (after an attempt whose answer was lost: %v)", ErrLogConflict, err)
		}
		b.logger.WarnContext(ctx, "append's answer lost and not in the log; sending it again",
			slog.String("subject", a.subject), slog.Uint64("expect", a.expect), slog.String("append_id", a.id), slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return 0, unknown
		case <-time.After(wait):
		}
		wait = min(2*wait, logRetryWaitMax)
	}
}

// How AppendLog waits between attempts whose answer was lost.
var (
	logRetryWait    = 50 * time.Millisecond
	logRetryWaitMax = time.Second
)

// HeaderLogAppend is on every message AppendLog writes: an id of that
// call, by which an append whose answer was lost is found in the log.
const HeaderLogAppend = "Toolgate-Append"

// LogOutcomeError says an append's answer was lost and the context ended
// before the log said whether it was stored; ResumeAppend follows it up.
type LogOutcomeError struct {
	Subject string
	Err     error
	append  *logAppend
}

func (e *LogOutcomeError) Error() string {
	return fmt.Sprintf("append to %s: no answer, and whether it was stored is unknown: %v", e.Subject, e.Err)
}

func (e *LogOutcomeError) Unwrap() error { return e.Err }

// logMessages is the one message, or the parts, that append data.
func (b *Bus) logMessages(subject string, expect uint64, data []byte, header nats.Header, id string) ([]*nats.Msg, error) {
	part := b.LogPartSize()
	n := max((len(data)+part-1)/part, 1)
	if n > logMaxParts {
		return nil, &LogTooLargeError{Bytes: len(data), Limit: logMaxParts * part}
	}
	expectHdr := strconv.FormatUint(expect, 10)
	msgs := make([]*nats.Msg, n)
	for i := range n {
		h := header
		if h == nil || n > 1 {
			h = cloneHeader(header)
		}
		m := &nats.Msg{Subject: subject, Data: data[i*part : min((i+1)*part, len(data))], Header: h}
		m.Header.Set(HeaderLogAppend, id)
		if n > 1 {
			m.Header.Set(HeaderLogPart, fmt.Sprintf("%d/%d", i+1, n))
		}
		if i == 0 {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, expectHdr)
		}
		msgs[i] = m
	}
	return msgs, nil
}

// appendAttempt sends msgs once, bounded by the connection's publish
// timeout and by three quarters of what ctx has left: the rest is for
// finding out whether a lost answer's append was stored.
func (b *Bus) appendAttempt(ctx context.Context, msgs []*nats.Msg) (uint64, error) {
	d := b.cfg.PublishTimeout
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl)*3/4)
	}
	actx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if len(msgs) == 1 {
		ack, err := b.js.PublishMsg(actx, msgs[0])
		if err != nil {
			return 0, logAppendError(err)
		}
		return ack.Sequence, nil
	}
	ack, err := jetstreamext.PublishMsgBatch(actx, b.js, msgs)
	if err != nil {
		return 0, logAppendError(err)
	}
	return ack.Sequence, nil
}

// answerLost reports whether err leaves unknown whether a publish was
// stored: anything but the stream's own answer, or the server's that no
// stream took the subject.
func answerLost(err error) bool {
	var apiErr *jetstream.APIError
	return !errors.As(err, &apiErr) && !errors.Is(err, context.Canceled) && !noStreamTook(err)
}

// What appendedAs finds after the expected sequence.
const (
	appendNone   = iota // no message: the append was not stored
	appendStored        // the append's own
	appendOther         // another's: the append was refused, or will be
)

// appendedAs looks for the append id (of n messages) as the first message
// of subject after expect, asking the stream's leader (a direct get may be
// answered by a replica behind it). When it is there, seq is the sequence
// of its last message.
func (b *Bus) appendedAs(ctx context.Context, stream, subject string, expect uint64, id string, n int) (seq uint64, there int, err error) {
	first, ok, err := b.leaderMsg(ctx, stream, expect+1, subject)
	switch {
	case err != nil:
		return 0, appendNone, err
	case !ok:
		return 0, appendNone, nil
	case first.Header.Get(HeaderLogAppend) != id:
		return 0, appendOther, nil
	case n == 1:
		return first.Sequence, appendStored, nil
	}
	// An atomic batch is stored in consecutive sequences.
	at := first.Sequence + uint64(n) - 1
	last, ok, err := b.leaderMsg(ctx, stream, at, "")
	if err != nil {
		return 0, appendNone, err
	}
	if !ok || last.Header.Get(HeaderLogAppend) != id || last.Header.Get(HeaderLogPart) != fmt.Sprintf("%d/%d", n, n) {
		return 0, appendNone, fmt.Errorf("append %s to %s: its first part is at %d, its last not at %d", id, subject, first.Sequence, at)
	}
	return last.Sequence, appendStored, nil
}

// leaderMsg gets the message of stream at seq (the first of subject from
// seq, when subject is set) from the stream's leader; ok is false when
// there is none.
func (b *Bus) leaderMsg(ctx context.Context, stream string, seq uint64, subject string) (m LogMsg, ok bool, err error) {
	req, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj,omitempty"`
	}{seq, subject})
	if err != nil {
		return LogMsg{}, false, err
	}
	rctx, cancel := context.WithTimeout(ctx, b.cfg.PublishTimeout)
	defer cancel()
	reply, err := b.nc.RequestWithContext(rctx, b.apiPrefix()+"STREAM.MSG.GET."+stream, req)
	if err != nil {
		return LogMsg{}, false, fmt.Errorf("get message %d of %s: %w", seq, stream, err)
	}
	var resp struct {
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return LogMsg{}, false, fmt.Errorf("get message %d of %s: %w", seq, stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return LogMsg{}, false, nil
	case resp.Error != nil:
		return LogMsg{}, false, fmt.Errorf("get message %d of %s: %w", seq, stream, resp.Error)
	case resp.Message == nil:
		return LogMsg{}, false, fmt.Errorf("get message %d of %s: an answer without a message", seq, stream)
	}
	h := nats.Header{}
	if len(resp.Message.Header) > 0 {
		if h, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return LogMsg{}, false, fmt.Errorf("get message %d of %s: headers: %w", seq, stream, err)
		}
	}
	return LogMsg{Subject: resp.Message.Subject, Sequence: resp.Message.Sequence, Header: h, Data: resp.Message.Data, Time: resp.Message.Time}, true, nil
}

func cloneHeader(h nats.Header) nats.Header {
	out := make(nats.Header, len(h)+2)
	for k, v := range h {
		out[k] = append([]string(nil), v...)
	}
	return out
}

// logAppendError maps a refused expected sequence to ErrLogConflict.
func logAppendError(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return fmt.Errorf("%w (%s)", ErrLogConflict, apiErr.Description)
	}
	return err
}

// WatchLog signals on the returned channel each time a message is appended
// to subject after sequence after, until ctx ends.
func (b *Bus) WatchLog(ctx context.Context, stream, subject string, after uint64) (<-chan struct{}, error) {
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    after + 1,
		HeadersOnly:    true,
	})
	if err != nil {
		return nil, err
	}
	ch := make(chan struct{}, 1)
	cc, err := cons.Consume(func(jetstream.Msg) {
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, err
	}
	go func() {
		<-ctx.Done()
		cc.Stop()
	}()
	return ch, nil
}

// LastLogMsgs returns the last message of each of subjects that has one, by
// subject, in one batched direct get. A message written in parts is
// represented by its last part (its headers; not its data).
func (b *Bus) LastLogMsgs(ctx context.Context, stream string, subjects []string) (map[string]LogMsg, error) {
	out := make(map[string]LogMsg, len(subjects))
	if len(subjects) == 0 {
		return out, nil
	}
	msgs, err := jetstreamext.GetLastMsgsFor(ctx, b.js, stream, subjects, jetstreamext.GetLastMsgsBatchSize(len(subjects)))
	if err != nil {
		return nil, err
	}
	for m, err := range msgs {
		if errors.Is(err, jetstreamext.ErrNoMessages) {
			break
		}
		if err != nil {
			return nil, err
		}
		out[m.Subject] = LogMsg{Sequence: m.Sequence, Header: m.Header, Data: m.Data, Time: m.Time}
	}
	return out, nil
}

// PurgeLog deletes the messages of subject but its last keep (0: all).
func (b *Bus) PurgeLog(ctx context.Context, stream, subject string, keep uint64) error {
	st, err := b.stream(ctx, stream)
	if err != nil {
		return err
	}
	opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject(subject)}
	if keep > 0 {
		opts = append(opts, jetstream.WithPurgeKeep(keep))
	}
	return st.Purge(ctx, opts...)
}

// stream is a handle on stream for requests that need only its name (a
// purge), looked up once: a lookup is a stream-info request whose answer,
// the whole configuration and state, is decoded from JSON; before each
// purge it doubled the requests and was a fifth of a retention sweep's
// CPU. Its cached info is not to be read.
func (b *Bus) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if st, ok := b.streams.Load(name); ok {
		return st.(jetstream.Stream), nil
	}
	st, err := b.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	cached, _ := b.streams.LoadOrStore(name, st)
	return cached.(jetstream.Stream), nil
}

// StreamState is what stream holds now: its messages, bytes, first and
// last sequences.
func (b *Bus) StreamState(ctx context.Context, stream string) (jetstream.StreamState, error) {
	info, err := b.streamInfo(ctx, stream)
	if err != nil {
		return jetstream.StreamState{}, err
	}
	return info.State, nil
}

// streamInfo is stream's configuration and state, in one request: the
// lookup of a stream reads its info.
func (b *Bus) streamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	return st.CachedInfo(), nil
}

// LastSequence is the sequence of the last message stream holds (0 when
// it has held none).
func (b *Bus) LastSequence(ctx context.Context, stream string) (uint64, error) {
	st, err := b.StreamState(ctx, stream)
	return st.LastSeq, err
}

// HeaderMsg is a message of a stretch of a stream as ScanHeaders gives it:
// where it is, when it was stored, and its headers.
type HeaderMsg struct {
	Subject string
	Seq     uint64
	Time    time.Time
	Header  nats.Header
}

// StartsLog reports whether m is the first message of its subject's log:
// AppendLog sends a log's first message expecting no message before it,
// and the server stores that header with it. A scan of headers finds the
// logs created in a stretch of the stream by it, in the order they were.
func (m HeaderMsg) StartsLog() bool {
	return m.Header.Get(jetstream.ExpectedLastSubjSeqHeader) == "0"
}

// ScanHeaders calls fn with each message of stream matching filter from
// sequence from up to the stream's last message when the scan began, in
// order, until fn returns false. Only headers travel: it is for finding
// messages by their headers or their age in a stretch of a stream, not for
// reading them.
func (b *Bus) ScanHeaders(ctx context.Context, stream, filter string, from uint64, fn func(HeaderMsg) bool) error {
	last, filter, err := b.scanBounds(ctx, stream, filter)
	if err != nil {
		return err
	}
	if last < from {
		return nil
	}
	err = b.readOnce(ctx, stream, false, jetstream.ConsumerConfig{
		FilterSubject: filter,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   max(from, 1),
		HeadersOnly:   true,
	}, func(m jetstream.Msg, meta *jetstream.MsgMetadata) bool {
		if meta.Sequence.Stream > last {
			return false
		}
		if !fn(HeaderMsg{Subject: m.Subject(), Seq: meta.Sequence.Stream, Time: meta.Timestamp, Header: m.Headers()}) {
			return false
		}
		return meta.Sequence.Stream < last
	})
	if err != nil {
		return fmt.Errorf("scan %s from %d: %w", stream, from, err)
	}
	return nil
}

// ScanStream calls fn with each message of stream matching filter, oldest
// first, up to the stream's last message when the scan began: a one-shot
// read that ends, where an ordered consumer follows. A message removed
// meanwhile (a purged conversation's events) is left out, never waited
// for. The scan's consumer is deleted after it, unless keepConsumer is set,
// for a role that may not delete consumers of stream: the server removes
// it once it is unused for 10 s.
func (b *Bus) ScanStream(ctx context.Context, stream, filter string, keepConsumer bool, fn func(jetstream.Msg, *jetstream.MsgMetadata)) error {
	last, filter, err := b.scanBounds(ctx, stream, filter)
	if err != nil {
		return err
	}
	if last == 0 {
		return nil
	}
	cfg := jetstream.ConsumerConfig{FilterSubject: filter, DeliverPolicy: jetstream.DeliverAllPolicy}
	return b.readOnce(ctx, stream, keepConsumer, cfg, func(m jetstream.Msg, meta *jetstream.MsgMetadata) bool {
		if meta.Sequence.Stream > last {
			return false
		}
		fn(m, meta)
		return meta.Sequence.Stream < last
	})
}

// scanBounds is where a scan of stream under filter ends, the stream's
// last sequence now, and the filter its consumer is made with: none for a
// filter that is the stream's one subject. The server goes over every
// subject of a stream to count what a consumer with a wildcard filter has
// pending when making it (2.5–3 ms with 100,000 subjects, 0.2 ms without
// the filter), a cost that grew with the stream on every scan.
func (b *Bus) scanBounds(ctx context.Context, stream, filter string) (uint64, string, error) {
	info, err := b.streamInfo(ctx, stream)
	if err != nil {
		return 0, "", err
	}
	if slices.Equal(info.Config.Subjects, []string{filter}) {
		filter = ""
	}
	return info.State.LastSeq, filter, nil
}

// readOnce reads what a consumer of stream made with cfg (acks none, in
// memory) delivers, calling fn with each message until it returns false or
// the consumer has nothing more now, then deletes it (unless keep is set:
// the server removes it once unused). It asks for what is there without
// waiting (FetchNoWait), so a message counted when it began and removed
// since (a purged key, a deleted log) ends the read instead of being
// waited for: an ordered consumer or a KV watcher ends its first pass
// only on the message it counted last, and waited for ever for one purged
// meanwhile.
func (b *Bus) readOnce(ctx context.Context, stream string, keep bool, cfg jetstream.ConsumerConfig, fn func(jetstream.Msg, *jetstream.MsgMetadata) bool) error {
	cfg.AckPolicy = jetstream.AckNonePolicy
	cfg.MemoryStorage = true
	cfg.InactiveThreshold = readOnceInactive
	cons, err := b.js.CreateConsumer(ctx, stream, cfg)
	if err != nil {
		return err
	}
	if !keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readOnceInactive)
			defer cancel()
			_ = b.js.DeleteConsumer(dctx, stream, cons.CachedInfo().Name)
		}()
	}
	for size := readOnceFirst; ; size = min(2*size, readOnceBatch) {
		batch, err := cons.FetchNoWait(size)
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			if !fn(m, meta) {
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		if n == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// How readOnce reads: readOnceFirst messages in its first request, twice
// as many in each next one up to readOnceBatch (a read that stops early,
// as a page of a list does, is not sent a thousand messages it stops
// before), its consumer left to the server readOnceInactive after its
// last use if it could not be deleted.
const (
	readOnceFirst    = 128
	readOnceBatch    = 1024
	readOnceInactive = 10 * time.Second
)
