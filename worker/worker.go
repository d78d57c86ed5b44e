package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/telemetry"
	iworker "github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// Call is a call request: the tool, its args (JSON), the run and
// conversation it belongs to, its deadline and attempt.
type Call = wire.CallRequest

// Reply is a handler's answer. A handler fills Outcome and Value (or
// Message); the worker sets the ids.
type Reply = wire.CallReply

// Handler runs the calls of a tool.
type Handler interface {
	Handle(ctx context.Context, call Call) (Reply, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, call Call) (Reply, error)

// Handle calls f(ctx, call).
func (f HandlerFunc) Handle(ctx context.Context, call Call) (Reply, error) { return f(ctx, call) }

// Middleware wraps a handler; see Worker.Use.
type Middleware func(Handler) Handler

// Tool is a tool a worker serves.
type Tool struct {
	// Name is the tool's name, as agents call it; required.
	Name string
	// Description and Parameters (the JSON Schema of its args) are
	// advertised; both may be empty.
	Description string
	Parameters  json.RawMessage
	// Handler runs its calls; required.
	Handler Handler
}

// Config configures a Worker. The zero value serves with the defaults.
type Config struct {
	// ID names the worker in its replies. Defaults to <hostname>-<pid>.
	ID string
	// Concurrency bounds the calls running at once. Defaults to 4.
	Concurrency int
	// AckWait is how long a call may go without an ack or an in-progress
	// ack before it is delivered again; in-progress acks go out every
	// AckWait/3 while a handler runs. Every worker of a tool should use the
	// same value. Defaults to 30s.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries of one call. Defaults to 5.
	MaxDeliver int
	// DrainTimeout bounds how long Run waits, once its context ends, for
	// calls in flight; calls still running then are cancelled and handed
	// back. Defaults to 30s.
	DrainTimeout time.Duration
	// NoAdvertise keeps the tools out of the toolgate_tools bucket.
	NoAdvertise bool
	// Metrics, when set, receives the tool-worker's collectors and counts
	// every call the worker takes, as tool-worker does:
	// toolgate_tool_calls_total{tool,outcome} (return, retry, failed,
	// error, expired, interrupted, cancelled, publish_error),
	// toolgate_tool_call_seconds{tool}, toolgate_tool_calls_in_flight{tool}
	// toolgate_redeliveries_total{component="worker",tool} and
	// toolgate_dead_letters_total{component="worker",reason}. It is not a
	// middleware: a middleware sees only the calls its handler runs, not
	// one whose deadline passed before it started, one handed back by a
	// drain before it ran, or one whose reply could not be published.
	Metrics prometheus.Registerer
	// Logger receives the worker's log. nil discards it.
	Logger *slog.Logger
}

// Worker serves tool calls. Register tools with Handle or Register, add
// middleware with Use, then Run it once.
type Worker struct {
	nc  *nats.Conn
	cfg Config

	mu    sync.Mutex
	tools []Tool
	mw    []Middleware
	ran   bool
}

// New returns a worker on nc, a connection to a server whose streams the
// orchestrator has set up. The worker does not close nc. On a server with
// toolgate's users, connect as a user of role worker with that role's
// inbox prefix, nats.CustomInboxPrefix("_INBOX_worker"): the only reply
// subjects the role may subscribe to.
func New(nc *nats.Conn, cfg Config) (*Worker, error) {
	if nc == nil {
		return nil, errors.New("worker: connection is nil")
	}
	return &Worker{nc: nc, cfg: cfg}, nil
}

// Handle adds a tool. Its name must be a valid subject token and unique in
// the worker.
func (w *Worker) Handle(t Tool) error {
	if err := wire.ValidateToken("tool name", t.Name); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if t.Handler == nil {
		return fmt.Errorf("worker: tool %s has no handler", t.Name)
	}
	if len(t.Parameters) > 0 && !json.Valid(t.Parameters) {
		return fmt.Errorf("worker: tool %s: parameters are not valid JSON", t.Name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ran {
		return fmt.Errorf("worker: tool %s added after Run", t.Name)
	}
	for _, o := range w.tools {
		if o.Name == t.Name {
			return fmt.Errorf("worker: tool %s is registered twice", t.Name)
		}
	}
	w.tools = append(w.tools, t)
	return nil
}

// Use adds middleware around every tool's handler; the first added is the
// outermost.
func (w *Worker) Use(mw ...Middleware) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mw = append(w.mw, mw...)
}

// Run serves calls until ctx ends, then drains (see Config.DrainTimeout)
// and returns nil after a clean drain. It fails at once on a permission
// error; a server still electing a leader or not yet set up is waited for.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.ran {
		w.mu.Unlock()
		return errors.New("worker: already run")
	}
	w.ran = true
	tools := append([]Tool(nil), w.tools...)
	mw := append([]Middleware(nil), w.mw...)
	w.mu.Unlock()
	if len(tools) == 0 {
		return errors.New("worker: no tools registered")
	}
	logger := w.cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	b, err := bus.FromConn(w.nc, bus.ConnConfig{Name: "toolgate-worker", Logger: logger})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer b.Close()
	cfg := iworker.Config{
		Bus: b, ID: w.cfg.ID, Concurrency: w.cfg.Concurrency, AckWait: w.cfg.AckWait,
		MaxDeliver: w.cfg.MaxDeliver, DrainTimeout: w.cfg.DrainTimeout, Advertise: !w.cfg.NoAdvertise,
		Logger: logger,
		// Spans come from the Tracing middleware, if used; the trace
		// context of the call still reaches handlers and replies.
		TracerProvider: noop.NewTracerProvider(),
	}
	for _, t := range tools {
		h := t.Handler
		for i := len(mw) - 1; i >= 0; i-- {
			h = mw[i](h)
		}
		cfg.Tools = append(cfg.Tools, iworker.Tool{
			Spec:     iworker.ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters},
			Executor: executor{h},
			Kind:     "go",
		})
	}
	if w.cfg.Metrics != nil {
		cfg.Metrics = telemetry.NewWorkerMetrics(w.cfg.Metrics)
	}
	iw, err := iworker.New(cfg)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return iw.Run(ctx)
}

// executor runs a handler within its call's deadline and turns the answer
// forms into replies.
type executor struct{ h Handler }

var errTimedOut = errors.New("call deadline exceeded")

func (e executor) Execute(ctx context.Context, call Call) (Reply, error) {
	if !call.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, call.Deadline, errTimedOut)
		defer cancel()
	}
	r, err := e.h.Handle(ctx, call)
	return answer(ctx, r, err)
}

func answer(ctx context.Context, r Reply, err error) (Reply, error) {
	var ae *answerError
	switch {
	case err == nil:
		if r.Outcome == "" {
			r.Outcome = wire.OutcomeReturn
		}
		return r, nil
	case errors.As(err, &ae):
		return Reply{Outcome: ae.outcome, Message: ae.msg}, nil
	case errors.Is(context.Cause(ctx), errTimedOut):
		return Reply{Outcome: wire.OutcomeFailed, Message: iworker.TimedOutMessage}, nil
	}
	return Reply{}, err
}
