package bus_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
)

// ReadLog reads a subject's messages in order, across several batches,
// from any sequence, leaving other subjects' messages out; an empty or
// unknown subject reads nothing.
func TestReadLog(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	ctx := bustest.Context(t)
	mine, other := bus.ConversationSubject("cmine"), bus.ConversationSubject("cother")
	var seqs []uint64
	for i := range 150 {
		ack, err := b.JetStream().Publish(ctx, mine, fmt.Appendf(nil, "%d", i))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
		if _, err := b.JetStream().Publish(ctx, other, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for _, from := range []int{0, 1, 63, 64, 149, 150} {
		after := uint64(0)
		if from > 0 {
			after = seqs[from-1]
		}
		var got []string
		last, err := b.ReadLog(ctx, bus.StreamConversations, mine, after, func(m bus.LogMsg) error {
			got = append(got, string(m.Data))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 150-from {
			t.Fatalf("after message %d: read %d messages, want %d", from, len(got), 150-from)
		}
		for i, d := range got {
			if d != fmt.Sprint(from+i) {
				t.Fatalf("after message %d: message %d is %q", from, i, d)
			}
		}
		if want := seqs[len(seqs)-1]; from < 150 && last != want || from == 150 && last != after {
			t.Errorf("after message %d: last sequence %d", from, last)
		}
	}
	last, err := b.ReadLog(ctx, bus.StreamConversations, bus.ConversationSubject("cnone"), 0, func(bus.LogMsg) error {
		t.Error("read a message of an empty subject")
		return nil
	})
	if err != nil || last != 0 {
		t.Errorf("empty subject: last %d, %v", last, err)
	}
}

// AppendLog is a compare-and-set on the subject's last sequence; a message
// over the max payload goes in parts, all or nothing, and reads back whole.
func TestAppendLog(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	ctx := bustest.Context(t)
	subj := bus.ConversationSubject("cappend")
	first, err := b.AppendLog(ctx, bus.StreamConversations, subj, 0, []byte("one"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AppendLog(ctx, bus.StreamConversations, subj, 0, []byte("again"), nil); !errors.Is(err, bus.ErrLogConflict) {
		t.Fatalf("a second first message: %v; want ErrLogConflict", err)
	}
	big := bytes.Repeat([]byte("0123456789"), b.LogPartSize()/4) // 2.5 parts
	second, err := b.AppendLog(ctx, bus.StreamConversations, subj, first, big, nats.Header{"X-Kept": []string{"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AppendLog(ctx, bus.StreamConversations, subj, first, []byte("stale"), nil); !errors.Is(err, bus.ErrLogConflict) {
		t.Fatalf("an append from a stale sequence: %v; want ErrLogConflict", err)
	}
	// A subject no stream captures fails at once as not captured, not
	// after waiting for a leader.
	if _, err := b.AppendLog(ctx, bus.StreamConversations, "nowhere.cappend", 0, []byte("lost"), nil); err == nil || errors.Is(err, bus.ErrNoLeader) || !errors.Is(err, bus.ErrNotCaptured) {
		t.Fatalf("an append no stream captures: %v; want ErrNotCaptured", err)
	}
	var got [][]byte
	last, err := b.ReadLog(ctx, bus.StreamConversations, subj, 0, func(m bus.LogMsg) error {
		got = append(got, m.Data)
		if len(got) == 2 && m.Header.Get("X-Kept") != "yes" {
			t.Error("the header of the message in parts is lost")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[0]) != "one" || !bytes.Equal(got[1], big) || last != second {
		t.Fatalf("read %d messages (last %d, want %d)", len(got), last, second)
	}
}

// ScanHeaders gives the headers of a stretch of a stream, from a sequence
// to the last one when it began, leaving out what was purged, and ends
// even when the stretch's last messages are gone.
func TestScanHeaders(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	b := bustest.NewBus(t)
	var seqs []uint64
	for i, id := range []string{"sa", "sb", "sc", "sd"} {
		seq, err := b.AppendLog(ctx, bus.StreamConversations, bus.ConversationSubject(id), 0, []byte("x"), nats.Header{"X-N": []string{strconv.Itoa(i)}})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if err := b.PurgeLog(ctx, bus.StreamConversations, bus.ConversationSubject("sd"), 0); err != nil {
		t.Fatal(err)
	}
	scan := func(from uint64) []string {
		t.Helper()
		var got []string
		if err := b.ScanHeaders(ctx, bus.StreamConversations, bus.ConversationSubjects, from, func(m bus.HeaderMsg) bool {
			got = append(got, m.Header.Get("X-N"))
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := scan(seqs[1]); strings.Join(got, ",") != "1,2" {
		t.Errorf("from the second: %v; want 1,2 (the fourth purged)", got)
	}
	if got := scan(seqs[3] + 1); len(got) != 0 {
		t.Errorf("past the last: %v; want nothing", got)
	}
}

// A log read while its first message is being appended reads empty or
// reads the message; never as damaged (the server counting a message the
// read did not get).
func TestReadLogWhileItsFirstMessageComes(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	ctx := bustest.Context(t)
	for i := range 200 {
		subj := bus.ConversationSubject("cnew" + strconv.Itoa(i))
		appended := make(chan error, 1)
		go func() {
			_, err := b.AppendLog(ctx, bus.StreamConversations, subj, 0, []byte("first"), nil)
			appended <- err
		}()
		for read := false; !read; {
			n := 0
			_, err := b.ReadLog(ctx, bus.StreamConversations, subj, 0, func(bus.LogMsg) error { n++; return nil })
			if _, ok := errors.AsType[*bus.LogUnreadableError](err); ok {
				t.Fatalf("log %d read while its first message came: %v", i, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			read = n == 1
		}
		if err := <-appended; err != nil {
			t.Fatal(err)
		}
	}
}

// A log that is not there (what every start with a conversation id of the
// caller's checks) costs two direct gets: of its last message, and of its
// last by the subject's index, which tells an empty log from one whose
// every message is damaged; not also a batched read by subject and two
// stream-info requests to count its messages. The spy sees every request
// to the JetStream API.
func TestReadEmptyLogRequests(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	b := bustest.Connect(t, srv, "test")
	bustest.Setup(t, b)
	ctx := bustest.Context(t)
	spy, requests := spyRequests(t, srv, "$JS.API.>", 64)
	last, err := b.ReadLog(ctx, bus.StreamConversations, bus.ConversationSubject("cnew"), 0, func(bus.LogMsg) error {
		t.Error("read a message of an empty log")
		return nil
	})
	if err != nil || last != 0 {
		t.Fatalf("empty log: last %d, %v", last, err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(requests) > 0 {
		m := <-requests
		got = append(got, strings.TrimPrefix(m.Subject, "$JS.API.")+" "+string(m.Data))
	}
	if len(got) > 2 || slices.ContainsFunc(got, func(r string) bool { return !strings.HasPrefix(r, "DIRECT.GET.") }) {
		t.Errorf("an empty log's read made %d requests, want 2 direct gets:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// ReadLog makes no subscription per read: each one made and removed
// changes the server's subscription list, whose match cache every publish
// then misses, and reads of logs not cached (a resume past the state
// cache's size) ran 25 to 30 times slower than the direct gets themselves.
func TestReadLogSubscribesOnce(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	b := bustest.Connect(t, srv, "test")
	bustest.Setup(t, b)
	ctx := bustest.Context(t)
	const logs = 20
	for i := range logs {
		if _, err := b.JetStream().Publish(ctx, bus.ConversationSubject(fmt.Sprintf("c%d", i)), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	inserts := func() uint64 {
		sz, err := srv.NATSServer().Subsz(nil)
		if err != nil {
			t.Fatal(err)
		}
		return sz.NumInserts
	}
	before := inserts()
	for i := range logs {
		n := 0
		if _, err := b.ReadLog(ctx, bus.StreamConversations, bus.ConversationSubject(fmt.Sprintf("c%d", i)), 0, func(bus.LogMsg) error {
			n++
			return nil
		}); err != nil || n != 1 {
			t.Fatalf("log %d: read %d messages, %v", i, n, err)
		}
	}
	if got := inserts() - before; got > 1 {
		t.Errorf("%d reads of logs made %d subscriptions, want at most 1", logs, got)
	}
}

// A log read from its start asks for its messages by their sequences, from
// its last back to its first, never for "the next message of the subject":
// the server finds that by reading every message between the two in their
// block, thousands of other logs' in a busy store. A log not written by
// AppendLog, one with messages purged, and one longer than a walk back
// goes read the same, by subject.
func TestReadLogFromStartGoesBySequence(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	b := bustest.Connect(t, srv, "test")
	bustest.Setup(t, b)
	ctx := bustest.Context(t)
	spy, requests := spyRequests(t, srv, "$JS.API.DIRECT.GET.>", 4096)
	// asked is what the direct gets sent since the last call asked for.
	asked := func() []string {
		t.Helper()
		if err := spy.Flush(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			select {
			case m := <-requests:
				got = append(got, string(m.Data))
			default:
				return got
			}
		}
	}
	// Each log's messages between other logs', as conversations write
	// them; the third of five in parts.
	big := bytes.Repeat([]byte("0123456789"), b.LogPartSize()/4)
	appendTo := func(id string, n int) ([]string, []uint64) {
		t.Helper()
		var want []string
		var seqs []uint64
		last := uint64(0)
		for i := range n {
			data := []byte(fmt.Sprintf("%s-%d", id, i))
			if i == 2 {
				data = append(data, big...)
			}
			seq, err := b.AppendLog(ctx, bus.StreamConversations, bus.ConversationSubject(id), last, data, nats.Header{"X-N": []string{strconv.Itoa(i)}})
			if err != nil {
				t.Fatal(err)
			}
			for j := range 20 {
				if _, err := b.JetStream().Publish(ctx, bus.ConversationSubject(fmt.Sprintf("%s-other%d", id, j)), []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			want, seqs, last = append(want, string(data)), append(seqs, seq), seq
		}
		return want, seqs
	}
	// read reads a log whose first message is its from-th written.
	read := func(id string, from int) ([]string, uint64) {
		t.Helper()
		var got []string
		last, err := b.ReadLog(ctx, bus.StreamConversations, bus.ConversationSubject(id), 0, func(m bus.LogMsg) error {
			if m.Header.Get("X-N") != strconv.Itoa(from+len(got)) {
				t.Errorf("%s: message %d has header X-N %q", id, len(got), m.Header.Get("X-N"))
			}
			got = append(got, string(m.Data))
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return got, last
	}

	want, seqs := appendTo("cchain", 5)
	asked()
	got, last := read("cchain", 0)
	if !slices.Equal(got, want) || last != seqs[len(seqs)-1] {
		t.Fatalf("read %d messages (last %d), want %d (last %d)", len(got), last, len(want), seqs[len(seqs)-1])
	}
	reqs := asked()
	for _, r := range reqs {
		if strings.Contains(r, "next_by_subj") {
			t.Errorf("a read from the start asked %s: a scan", r)
		}
	}
	// One get for each message, one more for the earlier parts of the
	// one in parts.
	if len(reqs) != len(want)+1 {
		t.Errorf("%d direct gets for a log of %d messages, want %d: %v", len(reqs), len(want), len(want)+1, reqs)
	}

	// Longer than a walk back goes.
	long, longSeqs := appendTo("clong", 40)
	if got, last := read("clong", 0); !slices.Equal(got, long) || last != longSeqs[len(longSeqs)-1] {
		t.Errorf("a long log: read %d messages (last %d), want %d", len(got), last, len(long))
	}
	// Purged but its last message, which names one not there (a deleted
	// conversation's tombstone).
	kept, keptSeqs := appendTo("cpurged", 4)
	if err := b.PurgeLog(ctx, bus.StreamConversations, bus.ConversationSubject("cpurged"), 1); err != nil {
		t.Fatal(err)
	}
	if got, last := read("cpurged", 3); !slices.Equal(got, kept[3:]) || last != keptSeqs[3] {
		t.Errorf("a log purged but its last message: read %d messages (last %d), want 1 (last %d)", len(got), last, keptSeqs[3])
	}
	// Written without the expected sequence.
	for i := range 3 {
		if _, err := b.JetStream().PublishMsg(ctx, &nats.Msg{Subject: bus.ConversationSubject("cplain"), Data: []byte(strconv.Itoa(i)), Header: nats.Header{"X-N": []string{strconv.Itoa(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := read("cplain", 0); strings.Join(got, ",") != "0,1,2" {
		t.Errorf("a log written without expected sequences: %v", got)
	}
}

// spyRequests is every request to subject (a JetStream API's) from now on,
// seen by a connection of its own (spy: flush it before reading what came),
// up to room of them unread.
func spyRequests(t *testing.T, srv *embedded.Server, subject string, room int) (spy *nats.Conn, requests chan *nats.Msg) {
	t.Helper()
	spy = bustest.Connect(t, srv, "spy").Conn()
	requests = make(chan *nats.Msg, room)
	sub, err := spy.ChanSubscribe(subject, requests)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	return spy, requests
}
