package bustest

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// StreamMsgs is the number of messages stream holds.
func StreamMsgs(t testing.TB, b *bus.Bus, stream string) uint64 {
	t.Helper()
	return streamInfo(t, b, stream).State.Msgs
}

// SubjectMsgs is the number of messages stream holds on subject: a
// reply's, on the subject it was published on, wherever the stream
// stores it (StoredAs).
func SubjectMsgs(t testing.TB, b *bus.Bus, stream, subject string) uint64 {
	t.Helper()
	subject = StoredAs(t, b, stream, subject)
	return streamInfo(t, b, stream, jetstream.WithSubjectFilter(subject)).State.Subjects[subject]
}

// StoredAs is the subject stream stores a message published on subject
// under: a reply's is in its run's partition (bus.StoredReplySubject).
func StoredAs(t testing.TB, b *bus.Bus, stream, subject string) string {
	t.Helper()
	if stream != wire.StreamReplies {
		return subject
	}
	run, kind, err := wire.ParseReplySubject(subject)
	if err != nil {
		return subject
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	n, err := b.ReplyPartitions(ctx)
	if err != nil {
		t.Fatalf("reply partitions: %v", err)
	}
	return bus.StoredReplySubject(run, kind, n)
}

// Consumers is the number of consumers stream has.
func Consumers(t testing.TB, b *bus.Bus, stream string) int {
	t.Helper()
	return streamInfo(t, b, stream).State.Consumers
}

func streamInfo(t testing.TB, b *bus.Bus, stream string, opts ...jetstream.StreamInfoOpt) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	st, err := b.JetStream().Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx, opts...)
	if err != nil {
		t.Fatalf("stream %s info: %v", stream, err)
	}
	return info
}

// Messages reads every message stream holds on subject, oldest first.
func Messages(t testing.TB, b *bus.Bus, stream, subject string) []jetstream.Msg {
	t.Helper()
	n := int(SubjectMsgs(t, b, stream, subject))
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	c, err := b.JetStream().OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{StoredAs(t, b, stream, subject)}})
	if err != nil {
		t.Fatalf("read %s: %v", subject, err)
	}
	batch, err := c.Fetch(n, jetstream.FetchMaxWait(Timeout))
	if err != nil {
		t.Fatalf("read %s: %v", subject, err)
	}
	var out []jetstream.Msg
	for m := range batch.Messages() {
		out = append(out, m)
	}
	if err := batch.Error(); err != nil {
		t.Fatalf("read %s: %v", subject, err)
	}
	if len(out) != n {
		t.Fatalf("read %d messages on %s, the stream holds %d", len(out), subject, n)
	}
	return out
}

// Decisions reads every decision stored for run, oldest first.
func Decisions(t testing.TB, b *bus.Bus, run string) []wire.Decision {
	t.Helper()
	subj, err := wire.DecisionSubject(run)
	if err != nil {
		t.Fatal(err)
	}
	var out []wire.Decision
	for _, m := range Messages(t, b, wire.StreamReplies, subj) {
		var d wire.Decision
		if err := wire.Decode(m.Data(), m.Headers().Get(wire.HeaderContentType), &d); err != nil {
			t.Fatalf("decode decision: %v", err)
		}
		out = append(out, d)
	}
	return out
}

// LastDecision reads the last decision stored for run, or nil if there is
// none.
func LastDecision(t testing.TB, b *bus.Bus, run string) *wire.Decision {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	subj, err := wire.DecisionSubject(run)
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.JetStream().Stream(ctx, wire.StreamReplies)
	if err != nil {
		t.Fatalf("stream %s: %v", wire.StreamReplies, err)
	}
	m, err := st.GetLastMsgForSubject(ctx, StoredAs(t, b, wire.StreamReplies, subj))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("last decision of %s: %v", run, err)
	}
	var d wire.Decision
	if err := wire.Decode(m.Data, m.Header.Get(wire.HeaderContentType), &d); err != nil {
		t.Fatalf("decode decision: %v", err)
	}
	return &d
}

// DeadLetters reads every dead letter, oldest first.
func DeadLetters(t testing.TB, b *bus.Bus) []bus.DeadLetter {
	t.Helper()
	info := streamInfo(t, b, wire.StreamDLQ)
	var out []bus.DeadLetter
	if info.State.Msgs == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		// A gap is a dead letter already removed.
		if dl, err := b.GetDeadLetter(ctx, seq); err == nil {
			out = append(out, dl)
		}
	}
	return out
}

// Advertised waits until tool's advert is in the tools bucket and returns
// it as stored. A worker advertises once its consumers are in place, so a
// call published after this is taken at once.
func Advertised(t testing.TB, b *bus.Bus, tool string) []byte {
	t.Helper()
	kv, err := b.Tools(Context(t))
	if err != nil {
		t.Fatal(err)
	}
	var value []byte
	Poll(t, Timeout, "the advert of "+tool, func() (bool, string) {
		entry, err := kv.Get(Context(t), tool)
		if err != nil {
			return false, err.Error()
		}
		value = entry.Value
		return true, ""
	})
	return value
}
