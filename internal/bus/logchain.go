package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A log read from its start goes by its messages' sequences, not by its
// subject. A batched direct get by subject (next_by_subj) makes the server
// look for each next message of the subject from the one before it, and
// its file store finds that by reading every message between them in the
// block they share: in a store that many conversations write to at once,
// thousands of other conversations' records for each record of the log (a
// cold resume of 4,000 conversations spent a third of its CPU there, 0.9
// ms a read). The first and last messages of a subject, and a message at
// a sequence, the server finds by its index, without reading any other.
// Every message AppendLog writes names the sequence of the one before it
// (Nats-Expected-Last-Subject-Sequence, which the stream keeps with it; 0
// for a log's first), so a log is read from its last message back to its
// first, one direct get each.

// errNoLastMsg is readLogChain's when the server has no last message of
// the subject: the log is empty, or its last message cannot be loaded.
var errNoLastMsg = errors.New("no last message")

// logChainMax is how many messages a read by sequences goes back before it
// gives up for the batched read by subject: each is a round trip, where
// the batched read's are one per logBatch messages.
const logChainMax = 16

// readLogChain reads the messages of subject in stream from its last back
// to its first by the sequences each names, and returns them in order,
// each whole (a message in parts with its last part's sequence and
// headers). ok is false when the log cannot be read so: it is empty or
// gone, a message does not name the one before it (written other than by
// AppendLog), one named is not there (purged, damaged) or not of subject,
// or the log is longer than logChainMax; ReadLog then reads it by subject.
// It is errNoLastMsg when the server found no last message of subject.
func (b *Bus) readLogChain(ctx context.Context, stream, subject string) ([]LogMsg, bool, error) {
	cur, ok, err := b.directGet(ctx, stream, subject, directGetRequest{LastFor: subject})
	if err == nil && cur.Sequence == 0 {
		return nil, false, errNoLastMsg
	}
	if err != nil || !ok {
		return nil, false, chainRead(err)
	}
	var back []LogMsg
	for {
		whole, first, ok, err := b.wholeLogMsg(ctx, stream, subject, cur)
		if err != nil || !ok {
			return nil, false, chainRead(err)
		}
		back = append(back, whole)
		prev, err := strconv.ParseUint(first.Header.Get(jetstream.ExpectedLastSubjSeqHeader), 10, 64)
		if err != nil || prev >= first.Sequence {
			return nil, false, nil
		}
		if prev == 0 {
			break
		}
		if len(back) == logChainMax {
			return nil, false, nil
		}
		if cur, ok, err = b.directGet(ctx, stream, subject, directGetRequest{Seq: prev}); err != nil || !ok {
			return nil, false, chainRead(err)
		}
	}
	slices.Reverse(back)
	for i := range back {
		back[i].Pending = uint64(len(back) - 1 - i)
	}
	return back, true, nil
}

// wholeLogMsg is m joined with its earlier parts when it is the last part
// of a message appended in parts (read in one batched direct get by
// sequence: an atomic batch is stored at consecutive sequences), and the
// message's first part (m itself when it is whole), which names the
// sequence before it.
func (b *Bus) wholeLogMsg(ctx context.Context, stream, subject string, m LogMsg) (LogMsg, LogMsg, bool, error) {
	p := m.Header.Get(HeaderLogPart)
	if p == "" {
		return m, m, true, nil
	}
	i, n, ok := partOf(p)
	if !ok || i != n || m.Sequence < uint64(n) {
		return LogMsg{}, LogMsg{}, false, nil
	}
	if n == 1 {
		return m, m, true, nil
	}
	from := m.Sequence - uint64(n) + 1
	parts := make([]LogMsg, 0, n)
	unread := false
	_, err := b.directGetBatch(ctx, stream, directGetRequest{Seq: from, Batch: n - 1}, n, func(pm LogMsg) error {
		if pm.Sequence != from+uint64(len(parts)) || pm.Header.Get(jetstream.SubjectHeader) != subject ||
			pm.Header.Get(HeaderLogPart) != fmt.Sprintf("%d/%d", len(parts)+1, n) {
			unread = true
			return errLogEnd
		}
		parts = append(parts, pm)
		return nil
	})
	if unread || len(parts) != n-1 {
		return LogMsg{}, LogMsg{}, false, nil
	}
	if err != nil {
		return LogMsg{}, LogMsg{}, false, err
	}
	size := len(m.Data)
	for _, pm := range parts {
		size += len(pm.Data)
	}
	data := make([]byte, 0, size)
	for _, pm := range parts {
		data = append(data, pm.Data...)
	}
	m.Data = append(data, m.Data...)
	return m, parts[0], true, nil
}

// directGetRequest is a direct get: the message at Seq, or the first of
// NextFor from Seq, or the last of LastFor; Batch asks for that many from
// Seq, each answered, then an end-of-batch marker.
type directGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	Batch   int    `json:"batch,omitempty"`
	// MultiLastFor asks for the last message of each subject (one here:
	// logHasNone).
	MultiLastFor []string `json:"multi_last,omitempty"`
}

// directGet asks stream for one message of subject; ok is false when there
// is none, or the one there is of another subject.
func (b *Bus) directGet(ctx context.Context, stream, subject string, req directGetRequest) (LogMsg, bool, error) {
	var got LogMsg
	ok := false
	_, err := b.directGetBatch(ctx, stream, req, 1, func(m LogMsg) error {
		got, ok = m, m.Header.Get(jetstream.SubjectHeader) == subject
		return nil
	})
	if err != nil {
		return LogMsg{}, false, err
	}
	return got, ok, nil
}

// directGetBatch sends req and calls fn with each message of its answer,
// up to size of them (size-1 and the end marker for a batch), answered on
// the connection's one subscription for log reads; it returns the answer's
// end marker, if any. A "not found" answer ends it with no message;
// another status is an error. fn returning errLogEnd ends the read.
func (b *Bus) directGetBatch(ctx context.Context, stream string, req directGetRequest, size int, fn func(LogMsg) error) (*nats.Msg, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if err := b.logs.open(b.nc); err != nil {
		return nil, err
	}
	inbox, ch, done := b.logs.read(size + 1)
	defer done()
	if err := b.nc.PublishRequest(b.apiPrefix()+"DIRECT.GET."+stream, inbox, data); err != nil {
		return nil, err
	}
	timer := time.NewTimer(readLogStall)
	defer timer.Stop()
	for n := 0; ; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
			return nil, fmt.Errorf("no answer to a direct get for %s", readLogStall)
		case m := <-ch:
			timer.Reset(readLogStall)
			if len(m.Data) == 0 {
				switch status := m.Header.Get("Status"); status {
				case "204", "404":
					return m, nil
				case "":
				default:
					return nil, &directGetStatusError{Status: status, Description: m.Header.Get("Description")}
				}
			}
			seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("direct get: bad %s header %q", jetstream.SequenceHeader, m.Header.Get(jetstream.SequenceHeader))
			}
			t, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
			if err := fn(LogMsg{Sequence: seq, Header: m.Header, Data: m.Data, Time: t}); err != nil {
				if errors.Is(err, errLogEnd) {
					return nil, nil
				}
				return nil, err
			}
			n++
			if req.Batch == 0 && n == 1 {
				return nil, nil
			}
		}
	}
}

// directGetStatusError is a direct get answered with an error status.
type directGetStatusError struct {
	Status, Description string
}

func (e *directGetStatusError) Error() string {
	return fmt.Sprintf("direct get: %s %s", e.Status, e.Description)
}

// chainRead is err for readLogChain: nil for an answer that says the log
// cannot be read by its sequences (the batched read by subject says what
// there is, or why not), err otherwise.
func chainRead(err error) error {
	if _, ok := errors.AsType[*directGetStatusError](err); ok {
		return nil
	}
	return err
}
