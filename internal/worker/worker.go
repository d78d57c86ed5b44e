package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/worker/seam"
	"github.com/toolgate/toolgate/wire"
	"github.com/toolgate/toolgate/worker"
)

// Config configures a Worker: worker.Config on a bus the caller made, with
// the tools listed.
type Config struct {
	// Bus is the connection to JetStream; required. The streams must have
	// been set up (bus.Setup). The worker does not close it.
	Bus *bus.Bus
	// Tools are the tools served, each on its durable call_<tool>; at least
	// one, names unique.
	Tools []Tool
	// ID identifies this worker in replies. Defaults to <hostname>-<pid>.
	ID string
	// Concurrency bounds the calls running at once across all tools.
	// Defaults to 4.
	Concurrency int
	// AckWait of the call consumers (worker.Config.AckWait). Defaults to 30s.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries of a call. Defaults to 5.
	MaxDeliver int
	// BackOff are the delays before a call whose executor hit an
	// infrastructure error is delivered again. Defaults to 1s, 5s, 30s, 2m.
	BackOff []time.Duration
	// DrainTimeout bounds how long Run waits, once its context ends, for
	// calls in flight. Defaults to 30s.
	DrainTimeout time.Duration
	// PublishTimeout bounds the publication of one reply. Defaults to 10s.
	PublishTimeout time.Duration
	// Advertise puts the tools in the toolgate_tools bucket and renews them
	// every AdvertiseEvery while the worker runs. Off by default.
	Advertise bool
	// AdvertiseEvery is how often advertisements are renewed. Defaults to
	// 30s.
	AdvertiseEvery time.Duration
	// ConsumerCheckEvery is how often each call_<tool>'s configuration on
	// the server is checked. Defaults to 30s.
	ConsumerCheckEvery time.Duration
	// Logger receives the worker's log. nil discards it.
	Logger *slog.Logger
	// Clock is the clock for deadlines. Defaults to time.Now.
	Clock func() time.Time
	// Metrics counts calls by tool and outcome, their run time, calls in
	// flight and redeliveries. nil records nothing.
	Metrics *telemetry.WorkerMetrics
	// TracerProvider makes one span per call. Defaults to the global
	// provider (no-op unless telemetry.Setup installed one).
	TracerProvider trace.TracerProvider
}

func (c Config) validate() error {
	if c.Bus == nil {
		return errors.New("bus is nil")
	}
	if len(c.Tools) == 0 {
		return errors.New("no tools to serve")
	}
	seen := map[string]bool{}
	for _, t := range c.Tools {
		if err := wire.ValidateToken("tool name", t.Spec.Name); err != nil {
			return err
		}
		if seen[t.Spec.Name] {
			return fmt.Errorf("tool %s is listed twice", t.Spec.Name)
		}
		seen[t.Spec.Name] = true
		if t.Executor == nil {
			return fmt.Errorf("tool %s has no executor", t.Spec.Name)
		}
		if len(t.Spec.Parameters) > 0 && !json.Valid(t.Spec.Parameters) {
			return fmt.Errorf("tool %s: parameters are not valid JSON", t.Spec.Name)
		}
	}
	return nil
}

// Worker serves tool calls from JetStream: a worker.Worker whose tools are
// executors.
type Worker struct {
	w *worker.Worker
}

// New checks cfg and returns a worker.
func New(cfg Config) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("worker config: %w", err)
	}
	wc := worker.Config{
		ID: cfg.ID, Concurrency: cfg.Concurrency, AckWait: cfg.AckWait, MaxDeliver: cfg.MaxDeliver,
		BackOff: cfg.BackOff, DrainTimeout: cfg.DrainTimeout, PublishTimeout: cfg.PublishTimeout,
		NoAdvertise: !cfg.Advertise, AdvertiseEvery: cfg.AdvertiseEvery, ConsumerCheckEvery: cfg.ConsumerCheckEvery,
		Logger: cfg.Logger, Clock: cfg.Clock, TracerProvider: cfg.TracerProvider,
	}
	if cfg.Metrics != nil {
		wc.Metrics = cfg.Metrics
	}
	if wc.TracerProvider == nil {
		wc.TracerProvider = otel.GetTracerProvider()
	}
	v, err := seam.OnBus(cfg.Bus, wc)
	if err != nil {
		return nil, err
	}
	iw := &Worker{w: v.(*worker.Worker)}
	for _, t := range cfg.Tools {
		if err := iw.AddTool(t); err != nil {
			return nil, fmt.Errorf("worker config: %w", err)
		}
	}
	return iw, nil
}

// ID is the worker id set on replies.
func (w *Worker) ID() string { return w.w.ID() }

// Run serves calls until ctx ends, then drains (worker.Worker.Run).
func (w *Worker) Run(ctx context.Context) error { return w.w.Run(ctx) }

// AddTool serves one more tool, before or while Run serves
// (worker.Worker.Handle).
func (w *Worker) AddTool(t Tool) error {
	if t.Executor == nil {
		return fmt.Errorf("tool %s has no executor", t.Spec.Name)
	}
	if t.Kind == "" {
		t.Kind = "custom"
	}
	return w.w.Handle(worker.Tool{
		Name: t.Spec.Name, Description: t.Spec.Description, Parameters: t.Spec.Parameters,
		Handler: handlerOf(t.Executor), Kind: t.Kind,
	})
}

// Readvertise asks the advertiser to renew every advertisement now.
func (w *Worker) Readvertise() { w.w.Readvertise() }

// handlerOf is ex as a worker.Handler, an Advertiser too if ex is one.
func handlerOf(ex Executor) worker.Handler {
	if h, ok := ex.(worker.Handler); ok {
		return h
	}
	if a, ok := ex.(worker.Advertiser); ok {
		return advertisingHandler{ex, a}
	}
	return executorHandler{ex}
}

type executorHandler struct{ ex Executor }

func (h executorHandler) Handle(ctx context.Context, call worker.Call) (worker.Reply, error) {
	r, err := h.ex.Execute(ctx, wire.CallRequest(call))
	return worker.Reply(r), err
}

type advertisingHandler struct {
	ex Executor
	worker.Advertiser
}

func (h advertisingHandler) Handle(ctx context.Context, call worker.Call) (worker.Reply, error) {
	r, err := h.ex.Execute(ctx, wire.CallRequest(call))
	return worker.Reply(r), err
}
