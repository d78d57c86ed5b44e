package bus

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// A message its constructor validated is encoded without validating it
// again, to exactly the bytes the validating encoder gives, in either
// content type.
func TestValidatedMessageEncodesTheSame(t *testing.T) {
	ev := wire.Event{ConversationID: "c1", RunID: "r1", Type: "run_started", Data: json.RawMessage(`{"prompt":"hi"}`), Time: time.Unix(1700000000, 5).UTC()}
	req := wire.CallRequest{RunID: "r1", ConversationID: "c1", ToolCallID: "call_1", ToolName: "noop", Args: json.RawMessage(`{"a":1}`), Deadline: time.Unix(1700000100, 0).UTC(), Attempt: 1}
	evMsg, err := EventMessage(ev, "")
	if err != nil {
		t.Fatal(err)
	}
	batchMsg, err := EventBatchMessage([]wire.Event{ev, ev})
	if err != nil {
		t.Fatal(err)
	}
	callMsg, err := CallMessage(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range []string{wire.ContentTypeMsgpack, wire.ContentTypeJSON} {
		b := &Bus{cfg: ConnConfig{ContentType: ct}}
		for _, o := range []Outgoing{evMsg, batchMsg, callMsg} {
			if !o.valid {
				t.Fatalf("%s: not marked validated", o.Subject)
			}
			m, _, err := b.message(o)
			if err != nil {
				t.Fatal(err)
			}
			want, err := wire.Encode(o.Value, ct)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(m.Data, want) {
				t.Errorf("%s as %s: %q, want %q", o.Subject, ct, m.Data, want)
			}
		}
	}
	// An Outgoing made by hand is still validated.
	b := &Bus{cfg: ConnConfig{ContentType: wire.ContentTypeMsgpack}}
	if _, _, err := b.message(Outgoing{Subject: "toolgate.event.c1", Value: wire.Event{}, Header: nats.Header{}}); err == nil {
		t.Error("an invalid event made by hand was encoded")
	}
}

// An append is looked up in the log only when its answer may have been
// lost: not when the stream answered, when no stream took it, or when the
// caller gave up.
func TestAnswerLost(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		lost bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("publish: %w", nats.ErrTimeout), true},
		{nats.ErrConnectionClosed, true},
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
		{fmt.Errorf("publish: %w", jetstream.ErrNoStreamResponse), false},
		{nats.ErrNoResponders, false},
		{context.Canceled, false},
	} {
		if got := answerLost(tt.err); got != tt.lost {
			t.Errorf("answerLost(%v) = %v, want %v", tt.err, got, tt.lost)
		}
	}
}
