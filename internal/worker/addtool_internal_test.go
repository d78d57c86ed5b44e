package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/wire"
	pworker "github.com/toolgate/toolgate/worker"
)

// withdrawable is an executor that advertises its tool while offered is
// true, as an MCP server does until it drops the tool.
type withdrawable struct{ offered atomic.Bool }

func (x *withdrawable) Execute(_ context.Context, req wire.CallRequest) (wire.CallReply, error) {
	return wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"ran ` + req.ToolCallID + `"`)}, nil
}

func (x *withdrawable) Advert(string) (pworker.Advert, bool) {
	return pworker.Advert{Description: "added while running", Parameters: json.RawMessage(`{"type":"object"}`)}, x.offered.Load()
}

// logSink keeps the messages of a logger's records.
type logSink struct {
	mu   sync.Mutex
	msgs []string
}

func (s *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (s *logSink) Handle(_ context.Context, r slog.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, r.Message)
	return nil
}
func (s *logSink) WithAttrs([]slog.Attr) slog.Handler { return s }
func (s *logSink) WithGroup(string) slog.Handler      { return s }
func (s *logSink) count(msg string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, m := range s.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// Over the bus: a tool added while the worker runs is advertised and its
// calls are answered; once its executor withdraws it, its advert is
// deleted, but only the worker's own: an advert another worker wrote since
// stays.
func TestAddToolAndWithdrawOverTheBus(t *testing.T) {
	t.Parallel()
	b := bustest.NewBus(t)
	ctx := bustest.Context(t)
	kv, err := b.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sink := &logSink{}
	fixed := ExecutorFunc(func(context.Context, wire.CallRequest) (wire.CallReply, error) {
		return wire.CallReply{Outcome: wire.OutcomeReturn}, nil
	})
	w, err := New(Config{Bus: b, ID: "w1", Advertise: true, AdvertiseEvery: time.Hour, Logger: slog.New(sink),
		Tools: []Tool{{Spec: ToolSpec{Name: "fixed"}, Executor: fixed}}})
	if err != nil {
		t.Fatal(err)
	}
	bustest.Run(t, "worker", w.Run)
	advert := func(name string) (bus.ToolAdvert, error) {
		e, err := kv.Get(ctx, name)
		if err != nil {
			return bus.ToolAdvert{}, err
		}
		return bus.DecodeToolAdvert(e.Value)
	}
	bustest.WaitFor(t, "the fixed tool's advert", func() bool { _, err := advert("fixed"); return err == nil })

	x := &withdrawable{}
	x.offered.Store(true)
	if err := w.AddTool(Tool{Spec: ToolSpec{Name: "added"}, Executor: x, Kind: "mcp"}); err != nil {
		t.Fatal(err)
	}
	if err := w.AddTool(Tool{Spec: ToolSpec{Name: "added"}, Executor: x}); err == nil {
		t.Error("a second tool named added was accepted")
	}
	w.Readvertise()
	var a bus.ToolAdvert
	bustest.WaitFor(t, "the added tool's advert", func() bool { a, err = advert("added"); return err == nil })
	if a.Executor != "mcp" || a.WorkerID != "w1" || a.Description != "added while running" {
		t.Errorf("advert = %+v", a)
	}
	replies := make(chan wire.CallReply, 1)
	sub, err := b.ConsumeReplies(ctx, "test", bus.ConsumeConfig{}, bus.HandlerFunc[bus.Reply](
		func(_ context.Context, d *bus.Delivery[bus.Reply]) error {
			if d.Msg.Call != nil {
				replies <- *d.Msg.Call
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop(context.Background()) })
	call := bustest.SampleCall("run1", "c1")
	call.ToolName = "added"
	if _, err := b.PublishCall(ctx, call); err != nil {
		t.Fatal(err)
	}
	if r := bustest.Recv(t, replies, "the added tool's reply"); r.Outcome != wire.OutcomeReturn || string(r.Value) != `"ran c1"` {
		t.Errorf("reply = %+v", r)
	}

	// Withdrawn: the worker deletes its own advert.
	x.offered.Store(false)
	w.Readvertise()
	bustest.WaitFor(t, "the withdrawn advert deleted", func() bool {
		_, err := advert("added")
		return errors.Is(err, bus.ErrKeyNotFound)
	})
	if _, err := advert("fixed"); err != nil {
		t.Errorf("the fixed tool's advert: %v", err)
	}

	// Offered again, then another worker's advert overwrites this one's:
	// withdrawing it again leaves the other worker's entry.
	x.offered.Store(true)
	w.Readvertise()
	bustest.WaitFor(t, "the advert back", func() bool { _, err := advert("added"); return err == nil })
	other := bus.ToolAdvert{Name: "added", Kind: "call", Executor: "exec", WorkerID: "w2", At: time.Now().UTC()}
	data, err := json.Marshal(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "added", data); err != nil {
		t.Fatal(err)
	}
	x.offered.Store(false)
	w.Readvertise()
	bustest.WaitFor(t, "the refused delete", func() bool { return sink.count("withdraw advertisement") == 1 })
	if a, err := advert("added"); err != nil || a.WorkerID != "w2" {
		t.Errorf("after the withdrawal the advert is %+v, %v; want w2's", a, err)
	}
	if sink.count("serving added tool") != 1 {
		t.Error("the log does not say the added tool is served")
	}
}
