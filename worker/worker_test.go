package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/telemetry/telemetrytest"
	"github.com/toolgate/toolgate/schemas"
	"github.com/toolgate/toolgate/wire"
	"github.com/toolgate/toolgate/worker"
	"github.com/toolgate/toolgate/worker/prommetrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type weatherArgs struct {
	City string `json:"city" jsonschema:"description=the city"`
	Days int    `json:"days,omitempty"`
}

type forecast struct {
	City string  `json:"city"`
	Temp float64 `json:"temp"`
}

// env is a set-up server, a plain NATS connection for the worker (as a
// user's program would have) and a bus for the test's own reads.
type env struct {
	nc  *nats.Conn
	bus *bus.Bus
}

func newEnv(t *testing.T) env {
	t.Helper()
	srv := bustest.NewServer(t)
	b := bustest.Connect(t, srv, "test")
	bustest.Setup(t, b)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return env{nc: nc, bus: b}
}

func (e env) publish(t *testing.T, call wire.CallRequest, ct string) {
	t.Helper()
	if call.Deadline.IsZero() {
		call.Deadline = time.Now().Add(time.Minute)
	}
	hdr := nats.Header{}
	hdr.Set(wire.HeaderContentType, ct)
	o, err := bus.CallMessage(call, hdr)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.bus.PublishBatch(bustest.Context(t), []bus.Outgoing{o}); err != nil {
		t.Fatal(err)
	}
}

// reply waits for the reply to run/call and checks it as any other
// party's reply would be checked on the wire: its subject, its message id,
// its content type, and its body against schemas/call_reply.
func (e env) reply(t *testing.T, run, call string) wire.CallReply {
	t.Helper()
	subject, err := wire.CallReplySubject(run)
	if err != nil {
		t.Fatal(err)
	}
	var got *wire.CallReply
	bustest.Poll(t, bustest.Timeout, "the reply to "+call, func() (bool, string) {
		if bustest.SubjectMsgs(t, e.bus, wire.StreamReplies, subject) == 0 {
			return false, "no reply yet"
		}
		for _, m := range bustest.Messages(t, e.bus, wire.StreamReplies, subject) {
			var r wire.CallReply
			if err := wire.Decode(m.Data(), m.Headers().Get(wire.HeaderContentType), &r); err != nil {
				t.Fatalf("reply does not decode: %v", err)
			}
			if r.ToolCallID != call {
				continue
			}
			if id := m.Headers().Get(wire.HeaderMsgID); id != r.MsgID() {
				t.Errorf("reply msg id = %q, want %q", id, r.MsgID())
			}
			if m.Headers().Get(wire.HeaderCall) != call || m.Headers().Get(wire.HeaderRun) != run {
				t.Errorf("reply headers = %v", m.Headers())
			}
			doc, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := schemas.Validate("call_reply", doc); err != nil {
				t.Errorf("reply does not fit schemas/call_reply: %v\n%s", err, doc)
			}
			got = &r
			return true, ""
		}
		return false, "no reply to " + call
	})
	return *got
}

func run(t *testing.T, w *worker.Worker) func() error {
	return bustest.Run(t, "worker", w.Run)
}

func TestTypedToolAnswersOnTheWire(t *testing.T) {
	e := newEnv(t)
	w, err := worker.New(e.nc, worker.Config{ID: "w1", AckWait: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var fails atomic.Int32
	err = worker.Register(w, "get_weather", "Weather of a city", func(ctx context.Context, call worker.Call, a weatherArgs) (forecast, error) {
		switch a.City {
		case "Atlantis":
			return forecast{}, worker.Fail("no weather under the sea")
		case "Nowhere":
			return forecast{}, worker.Retry("there is no %s; name a real city", a.City)
		case "Flaky":
			if fails.Add(1) == 1 {
				return forecast{}, errors.New("weather service down")
			}
		}
		return forecast{City: a.City, Temp: 21.5}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)

	call := func(id, args, ct string) {
		e.publish(t, wire.CallRequest{RunID: "r1", ConversationID: "c1", ToolCallID: id, ToolName: "get_weather", Args: json.RawMessage(args), Attempt: 1}, ct)
	}
	call("a", `{"city":"Paris"}`, wire.ContentTypeMsgpack)
	call("b", `{"city":"Paris"}`, wire.ContentTypeJSON)
	call("c", `{"city":"Atlantis"}`, wire.ContentTypeMsgpack)
	call("d", `{"city":"Nowhere"}`, wire.ContentTypeMsgpack)
	call("e", `{"town":"Paris"}`, wire.ContentTypeMsgpack)
	call("f", `{"city":"Flaky"}`, wire.ContentTypeMsgpack)

	for _, id := range []string{"a", "b", "f"} {
		r := e.reply(t, "r1", id)
		if r.Outcome != wire.OutcomeReturn || r.WorkerID != "w1" {
			t.Errorf("reply %s = %+v", id, r)
		}
		var f forecast
		if err := json.Unmarshal(r.Value, &f); err != nil || f.Temp != 21.5 {
			t.Errorf("reply %s value = %s (%v)", id, r.Value, err)
		}
	}
	if r := e.reply(t, "r1", "c"); r.Outcome != wire.OutcomeFailed || r.Message != "no weather under the sea" {
		t.Errorf("fail reply = %+v", r)
	}
	if r := e.reply(t, "r1", "d"); r.Outcome != wire.OutcomeRetry || !strings.Contains(r.Message, "no Nowhere") {
		t.Errorf("retry reply = %+v", r)
	}
	// Args that do not fit the schema derived from weatherArgs never reach
	// the function: the model is told what is wrong.
	if r := e.reply(t, "r1", "e"); r.Outcome != wire.OutcomeRetry || !strings.Contains(r.Message, "city") || !strings.Contains(r.Message, "town") {
		t.Errorf("invalid args reply = %+v", r)
	}
	if n := fails.Load(); n != 2 {
		t.Errorf("the flaky call ran %d times, want 2 (an error hands it back)", n)
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	// Every call was acknowledged once its reply was stored.
	if n := bustest.StreamMsgs(t, e.bus, wire.StreamCalls); n != 0 {
		t.Errorf("%d calls left in the work queue", n)
	}
}

func TestAdvertisesToolWithSchema(t *testing.T) {
	e := newEnv(t)
	w, err := worker.New(e.nc, worker.Config{ID: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := worker.Register(w, "get_weather", "Weather of a city", func(context.Context, worker.Call, weatherArgs) (string, error) { return "", nil }); err != nil {
		t.Fatal(err)
	}
	run(t, w)
	var adv struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Executor    string          `json:"executor"`
		WorkerID    string          `json:"worker_id"`
	}
	doc := bustest.Advertised(t, e.bus, "get_weather")
	if err := json.Unmarshal(doc, &adv); err != nil {
		t.Fatal(err)
	}
	// Readers (the orchestrator's discover:, the approval inbox) ignore an
	// advert off the schema.
	if err := schemas.Validate("tool_advert", doc); err != nil {
		t.Errorf("advert does not fit schemas/tool_advert: %v\n%s", err, doc)
	}
	if _, err := bus.DecodeToolAdvert(doc); err != nil {
		t.Errorf("advert is refused by its readers: %v", err)
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(adv.Parameters, &schema); err != nil {
		t.Fatal(err)
	}
	if adv.Description != "Weather of a city" || adv.WorkerID != "w1" || adv.Executor != "go" ||
		schema.Type != "object" || len(schema.Properties) != 2 || len(schema.Required) != 1 || schema.Required[0] != "city" {
		t.Errorf("advertisement = %+v, schema %s", adv, adv.Parameters)
	}
}

func TestMiddlewareWrapsInOrderAndDeadlineFails(t *testing.T) {
	e := newEnv(t)
	w, err := worker.New(e.nc, worker.Config{ID: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan string, 8)
	mark := func(name string) worker.Middleware {
		return func(next worker.Handler) worker.Handler {
			return worker.HandlerFunc(func(ctx context.Context, c worker.Call) (worker.Reply, error) {
				order <- name
				return next.Handle(ctx, c)
			})
		}
	}
	w.Use(mark("outer"), mark("inner"))
	err = w.Handle(worker.Tool{Name: "slow", Handler: worker.HandlerFunc(func(ctx context.Context, c worker.Call) (worker.Reply, error) {
		order <- "handler"
		<-ctx.Done() // runs past its deadline
		return worker.Reply{}, ctx.Err()
	})})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	// The deadline must not pass before the worker takes the call (it
	// would then be answered "timed out" without any middleware): the
	// clock starts once the worker consumes, and leaves a loaded machine
	// time to deliver.
	bustest.Advertised(t, e.bus, "slow")
	e.publish(t, wire.CallRequest{RunID: "r1", ConversationID: "c1", ToolCallID: "a", ToolName: "slow", Args: json.RawMessage(`{}`),
		Deadline: time.Now().Add(3 * time.Second)}, wire.ContentTypeMsgpack)
	if r := e.reply(t, "r1", "a"); r.Outcome != wire.OutcomeFailed || r.Message != "timed out" {
		t.Errorf("reply = %+v, want failed: timed out", r)
	}
	for _, want := range []string{"outer", "inner", "handler"} {
		if got := bustest.Recv(t, order, "a middleware"); got != want {
			t.Errorf("ran %s, want %s", got, want)
		}
	}
}

func TestRegisterRefusesBadTools(t *testing.T) {
	e := newEnv(t)
	w, err := worker.New(e.nc, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, worker.Call, weatherArgs) (string, error) { return "", nil }
	if err := worker.Register(w, "bad.name", "", noop); err == nil || !strings.Contains(err.Error(), "dot") {
		t.Errorf("dotted name: %v", err)
	}
	if err := worker.Register(w, "ok", "", noop); err != nil {
		t.Fatal(err)
	}
	if err := worker.Register(w, "ok", "", noop); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("second registration: %v", err)
	}
	if err := worker.Register(w, "scalar", "", func(context.Context, worker.Call, int) (string, error) { return "", nil }); err == nil || !strings.Contains(err.Error(), "not a struct") {
		t.Errorf("scalar args: %v", err)
	}
	empty, _ := worker.New(e.nc, worker.Config{})
	if err := empty.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "no tools") {
		t.Errorf("run without tools: %v", err)
	}
}

// Config.Metrics counts every call the worker takes by its outcome,
// including those no handler ran: a call whose deadline passed before it
// started is counted "expired" (a middleware never sees it).
func TestMetricsCountEveryOutcome(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	w, err := worker.New(e.nc, worker.Config{ID: "w1", Metrics: prommetrics.New(reg)})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	err = w.Handle(worker.Tool{Name: "job", Handler: worker.HandlerFunc(func(ctx context.Context, c worker.Call) (worker.Reply, error) {
		ran.Add(1)
		if c.ToolCallID == "bad" {
			return worker.Reply{}, worker.Fail("no such thing")
		}
		return worker.Return("done")
	})})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	for _, c := range []struct {
		id       string
		deadline time.Time
	}{{"ok", time.Time{}}, {"bad", time.Time{}}, {"late", time.Now().Add(-time.Second)}} {
		e.publish(t, wire.CallRequest{RunID: "r1", ConversationID: "c1", ToolCallID: c.id, ToolName: "job", Args: json.RawMessage(`{}`), Deadline: c.deadline}, wire.ContentTypeMsgpack)
		e.reply(t, "r1", c.id)
	}
	// A call is counted when its handling ends, just after its reply.
	want := map[string]float64{"return": 1, "failed": 1, "expired": 1}
	bustest.Poll(t, bustest.Timeout, "calls counted by outcome", func() (bool, string) {
		got := callsByOutcome(t, reg, "job")
		return maps.Equal(got, want), fmt.Sprintf("toolgate_tool_calls_total{tool=job} by outcome %v, want %v", got, want)
	})
	if n := ran.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2 (not for the late call)", n)
	}
}

// callsByOutcome reads toolgate_tool_calls_total of tool from reg.
func callsByOutcome(t *testing.T, reg *prometheus.Registry, tool string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "toolgate_tool_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["tool"] == tool && m.GetCounter().GetValue() > 0 {
				got[labels["outcome"]] = m.GetCounter().GetValue()
			}
		}
	}
	return got
}

// With a tracer provider, the worker's span of a call and the Tracing
// middleware's span of its handler join the trace the call's headers
// carry, and the reply's headers continue it.
func TestTracingJoinsTheCallsTrace(t *testing.T) {
	e := newEnv(t)
	tp, exp := telemetrytest.Tracer(t)
	w, err := worker.New(e.nc, worker.Config{ID: "w1", TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	w.Use(worker.Tracing(tp))
	err = w.Handle(worker.Tool{Name: "job", Handler: worker.HandlerFunc(func(context.Context, worker.Call) (worker.Reply, error) {
		return worker.Return("done")
	})})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	hdr := nats.Header{}
	hdr.Set(wire.HeaderContentType, wire.ContentTypeMsgpack)
	hdr.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	o, err := bus.CallMessage(wire.CallRequest{RunID: "r1", ConversationID: "c1", ToolCallID: "t1", ToolName: "job",
		Args: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)}, hdr)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.bus.PublishBatch(bustest.Context(t), []bus.Outgoing{o}); err != nil {
		t.Fatal(err)
	}
	e.reply(t, "r1", "t1")
	subject, err := wire.CallReplySubject("r1")
	if err != nil {
		t.Fatal(err)
	}
	if parent := bustest.Messages(t, e.bus, wire.StreamReplies, subject)[0].Headers().Get("traceparent"); !strings.Contains(parent, traceID) {
		t.Errorf("reply traceparent = %q, want trace %s", parent, traceID)
	}
	callSubject, err := wire.CallSubject("job")
	if err != nil {
		t.Fatal(err)
	}
	// The worker's span ends just after the reply is stored.
	names := []string{"tool job", "process " + callSubject}
	bustest.Poll(t, bustest.Timeout, "the call's spans", func() (bool, string) {
		spans := exp.GetSpans()
		for _, name := range names {
			if _, ok := telemetrytest.SpanNamed(spans, name); !ok {
				return false, "spans: " + telemetrytest.SpanNames(spans)
			}
		}
		return true, ""
	})
	for _, name := range names {
		s, _ := telemetrytest.SpanNamed(exp.GetSpans(), name)
		if got := s.SpanContext.TraceID().String(); got != traceID {
			t.Errorf("span %q is in trace %s, want %s", name, got, traceID)
		}
	}
}
