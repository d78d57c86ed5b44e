package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// Streams and subjects the storage floor adds to the raw baseline's.
const (
	storageLogStream    = "BENCH_LOG"
	storageEventsStream = "BENCH_EVENTS"
	storageLogPrefix    = "bench.log."
	storageEventPrefix  = "bench.event."
)

// StorageSizes are the bytes the storage floor stores per message in its
// log and events streams, as the stream counts them (payload, subject and
// headers): toolgate's own, measured in the same run (StorageSizesOf), so
// that the floor stores what toolgate stores.
type StorageSizes struct {
	// Record is a conversation log record's.
	Record int `json:"record"`
	// Event is an event message's.
	Event int `json:"event"`
}

// defaultStorageSizes are toolgate's sizes at a batch-1 call as stored
// (3,051 bytes of records and 5,802 of events per call in bench/results.json
// of 2026-12-06), for a run whose toolgate side could not be measured.
var defaultStorageSizes = StorageSizes{Record: 1525, Event: 5800}

// StorageSizesOf are the sizes toolgate's measurement m stored per
// message, or the defaults where it did not say.
func StorageSizesOf(m *Measurement) StorageSizes {
	s := defaultStorageSizes
	if m == nil {
		return s
	}
	per := func(stream string) int {
		if n := m.Stored[stream]; n > 0 && m.StoredBytes[stream] > 0 {
			return int(m.StoredBytes[stream] / n)
		}
		return 0
	}
	if n := per(bus.StreamConversations); n > 0 {
		s.Record = n
	}
	if n := per(wire.StreamEvents); n > 0 {
		s.Event = n
	}
	return s
}

// NewStorageTarget is the raw baseline storing what toolgate stores for a
// batch-1 call beside its call and reply, and nothing else of toolgate's:
// before a conversation publishes its call, a record appended to a log
// subject of its own under Nats-Expected-Last-Subject-Sequence 0 and
// awaited (toolgate's one synchronous round trip: its first record); when
// the reply is in, a second record under the first's sequence, awaited,
// then an event message published without waiting for its ack (toolgate's
// record of the reply, claim and follow-up's end, and its events); the
// reply is acknowledged and the batch complete after the second record, as
// toolgate's. The log and events streams have toolgate's configurations.
// Its throughput over raw's is what toolgate's storage alone leaves of the
// raw round trip; toolgate's over it, what toolgate's own code costs. Batch
// 1 only: a larger batch's records depend on when its replies come.
func NewStorageTarget(env *Env, sizes StorageSizes) *RawTarget {
	return &RawTarget{env: env, storage: &sizes}
}

// NewStorageLookupTarget is the storage floor whose workers look each
// call up in the calls stream before replying, as toolgate's worker does
// to skip a call withdrawn after it was delivered (bus.CallQueued): a get
// of the call's sequence, direct where the calls stream allows direct
// gets (as toolgate's configures it), as toolgate's first look is. Toolgate's throughput over
// it is what toolgate's code costs beside storing and looking up.
func NewStorageLookupTarget(env *Env, sizes StorageSizes) *RawTarget {
	return &RawTarget{env: env, storage: &sizes, lookup: true}
}

// storageStreams are toolgate's conversations and events streams under
// other names and subjects.
func storageStreams(gen string) (log, events jetstream.StreamConfig, err error) {
	if log, err = streamAs(bus.StreamConversations, storageLogStream+"_"+gen, storageLogPrefix+gen+".>"); err != nil {
		return log, events, err
	}
	events, err = streamAs(wire.StreamEvents, storageEventsStream+"_"+gen, storageEventPrefix+gen+".>")
	return log, events, err
}

// storageRun is one measurement's storage: the streams' subjects, the
// payloads, and the first record's sequence of each conversation in flight.
type storageRun struct {
	js            jetstream.JetStream
	logPrefix     string
	eventPrefix   string
	record, event []byte
	first         sync.Map // run id → started
	bg            *failure
	// pending are the goroutines completing conversations and checking
	// their events' acks: Run waits for them before it deletes the streams.
	pending sync.WaitGroup
}

func newStorageRun(js jetstream.JetStream, gen string, sizes StorageSizes, bg *failure) *storageRun {
	s := &storageRun{js: js, logPrefix: storageLogPrefix + gen + ".", eventPrefix: storageEventPrefix + gen + ".", bg: bg}
	// A run id of the measured calls, for the subject and headers' size.
	run := runID(gen+"m", 1)
	s.record = payload(sizes.Record - storedOverhead(s.logPrefix+run, recordHeader(run, 0)))
	s.event = payload(sizes.Event - storedOverhead(s.eventPrefix+run, eventHeader(run)))
	return s
}

// payload is n bytes of filler (at least 1): what is stored, not what it
// says, is the floor's cost.
func payload(n int) []byte {
	b := make([]byte, max(n, 1))
	for i := range b {
		b[i] = byte('a' + i%26)
	}
	return b
}

// storedOverhead is what a stream stores of a message beside its payload:
// nats-server's file store record header and checksum (30 bytes), the
// subject and the headers as sent.
func storedOverhead(subject string, h nats.Header) int {
	n := 30 + len(subject) + len("NATS/1.0\r\n") + len("\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// recordHeader is a record's headers, as toolgate's appends carry them:
// the conversation's status and creation time, the append's id, and the
// sequence expected last.
func recordHeader(run string, expect uint64) nats.Header {
	h := nats.Header{}
	h.Set("Toolgate-Status", "paused")
	h.Set("Toolgate-Created", time.Now().UTC().Format(time.RFC3339Nano))
	h.Set(bus.HeaderLogAppend, run[len(run)-16:])
	h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
	return h
}

// eventHeader is the headers of the storage floor's event message of
// conversation conv.
func eventHeader(conv string) nats.Header {
	h := nats.Header{}
	h.Set(hdrContentType, wire.ContentTypeMsgpack)
	h.Set(hdrConversation, conv)
	return h
}

// appendRecord appends a record to run's log, expecting expect last.
func (s *storageRun) appendRecord(ctx context.Context, run string, expect uint64) (uint64, error) {
	m := &nats.Msg{Subject: s.logPrefix + run, Data: s.record, Header: recordHeader(run, expect)}
	ack, err := s.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, fmt.Errorf("append to %s after %d: %w", m.Subject, expect, err)
	}
	return ack.Sequence, nil
}

// started is a conversation in flight: its first record's sequence, and
// the conversation its event message names.
type started struct {
	seq  uint64
	conv string
}

// start stores a conversation's first record, before its call; the
// call's time runs from before it. Its event names its run, the
// conversation the storage floor's sizes are reckoned with.
func (s *storageRun) start(ctx context.Context, b *batch) error {
	now := time.Now()
	for i := range b.sent {
		b.sent[i] = now
	}
	return s.begin(ctx, b.run, b.run)
}

// begin stores the first record of run, of conversation conv.
func (s *storageRun) begin(ctx context.Context, run, conv string) error {
	seq, err := s.appendRecord(ctx, run, 0)
	if err != nil {
		return err
	}
	s.first.Store(run, started{seq: seq, conv: conv})
	return nil
}

// reply completes the conversation of a reply on a goroutine of its own,
// as toolgate's replies are recorded concurrently: the reply is
// acknowledged and its batch (in reg, if any) complete once the second
// record is stored.
func (s *storageRun) reply(ctx context.Context, msg jetstream.Msg, rep wire.CallReply, reg *registry) {
	s.pending.Go(func() {
		if err := s.complete(ctx, rep.RunID); err != nil {
			s.bg.set(err)
			_ = msg.Nak()
			return
		}
		if reg != nil {
			reg.arrive(rep.ToolCallID, time.Now())
		}
		_ = msg.Ack()
	})
}

// complete stores what a batch-1 conversation stores once its reply is
// in: the second record, awaited, and its event message, whose ack is
// checked off the conversation's way. A reply delivered again stores
// nothing.
func (s *storageRun) complete(ctx context.Context, run string) error {
	v, ok := s.first.LoadAndDelete(run)
	if !ok {
		// A reply delivered again: its conversation is complete, as
		// raw's registry ignores a second reply.
		return nil
	}
	st := v.(started)
	if _, err := s.appendRecord(ctx, run, st.seq); err != nil {
		return err
	}
	ev := &nats.Msg{Subject: s.eventPrefix + run, Data: s.event, Header: eventHeader(st.conv)}
	f, err := s.js.PublishMsgAsync(ev)
	if err != nil {
		return fmt.Errorf("publish event of %s: %w", run, err)
	}
	s.pending.Go(func() {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			s.bg.set(fmt.Errorf("publish event of %s: %w", run, err))
		case <-ctx.Done():
		}
	})
	return nil
}
