package bus_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/bus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every blocking wait in these tests.
const wait = 15 * time.Second

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

func startServer(t *testing.T, users ...bus.User) *bus.Server {
	t.Helper()
	srv, err := bus.StartServer(bus.ServerConfig{
		StoreDir: t.TempDir(),
		Listen:   "127.0.0.1:-1",
		Users:    users,
	})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	return srv
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	t.Cleanup(cancel)
	return ctx
}

func connectInProcess(t *testing.T, srv *bus.Server, cfg bus.ConnConfig) *bus.Bus {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	b, err := srv.Connect(ctxT(t), cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

func setup(t *testing.T, b *bus.Bus) {
	t.Helper()
	if err := b.Setup(ctxT(t), bus.SetupConfig{}); err != nil {
		t.Fatalf("setup: %v", err)
	}
}

func stop(t *testing.T, s *bus.Subscription) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// nextDeadLetter waits for the next message of TOOLGATE_DLQ after seq.
func nextDeadLetter(t *testing.T, b *bus.Bus, after uint64) bus.DeadLetter {
	t.Helper()
	ctx := ctxT(t)
	cons, err := b.JetStream().OrderedConsumer(ctx, bus.StreamDLQ, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: after + 1,
	})
	if err != nil {
		t.Fatalf("dlq consumer: %v", err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatalf("waiting for a dead letter: %v", err)
	}
	meta, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	dl, err := b.GetDeadLetter(ctx, meta.Sequence.Stream)
	if err != nil {
		t.Fatalf("get dead letter: %v", err)
	}
	return dl
}

func streamMsgs(t *testing.T, b *bus.Bus, stream string) uint64 {
	t.Helper()
	st, err := b.JetStream().Stream(ctxT(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

var deadline = time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)

func sampleCall(run, call string) bus.CallRequest {
	return bus.CallRequest{
		RunID: run, ConversationID: "conv1", ToolCallID: call, ToolName: "weather",
		Args: json.RawMessage(`{"city":"Paris","days":3,"ratio":0.5}`), Metadata: json.RawMessage(`{"k":[1,2]}`),
		Deadline: deadline, Attempt: 1,
	}
}

func sampleApproval(run, call string) bus.ApprovalRequest {
	args := json.RawMessage(`{"path":"/tmp/x","force":true}`)
	d, err := bus.DigestArgs(args)
	if err != nil {
		panic(err)
	}
	return bus.ApprovalRequest{
		RunID: run, ConversationID: "conv1", ToolCallID: call, ToolName: "delete_file",
		ToolDescription: "deletes a file", Parameters: json.RawMessage(`{"type":"object"}`),
		Args: args, ArgsDigest: d, Metadata: json.RawMessage(`{"reason":"destructive"}`),
		Deadline: deadline, Attempt: 1,
	}
}

func sampleReply(run, call string) bus.CallReply {
	return bus.CallReply{
		RunID: run, ToolCallID: call, Outcome: bus.OutcomeReturn,
		Value: json.RawMessage(`{"temp":21.5,"n":7}`), Content: "extra", Metadata: json.RawMessage(`{"m":1}`), WorkerID: "w1",
	}
}

func sampleDecision(run, call string) bus.Decision {
	a := sampleApproval(run, call)
	return bus.Decision{
		RunID: run, ToolCallID: call, ArgsDigest: a.ArgsDigest, Approved: true,
		OverrideArgs: json.RawMessage(`{"path":"/tmp/y"}`), Message: "ok", ApproverID: "alice",
		DecidedAt: time.Date(2026, 5, 1, 12, 0, 0, 123, time.UTC),
	}
}
