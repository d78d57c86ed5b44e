package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/telemetry/natstrace"
	"github.com/toolgate/toolgate/internal/worker/seam"
	"github.com/toolgate/toolgate/wire"
)

// Call is a call of a tool: what the orchestrator published on
// toolgate.call.<tool> (wire.CallRequest, field for field).
type Call struct {
	// RunID is the run that made the call; the reply goes to it.
	RunID string `json:"run_id"`
	// ConversationID is the conversation the run belongs to.
	ConversationID string `json:"conversation_id"`
	// ToolCallID is the model's id of the call, unique in the run.
	ToolCallID string `json:"tool_call_id"`
	// ToolName is the tool called.
	ToolName string `json:"tool_name"`
	// Args are the call's arguments, a JSON object already validated
	// against the tool's JSON Schema by the orchestrator; {} when the model
	// sent none.
	Args json.RawMessage `json:"args"`
	// Metadata is the JSON object the tool attached when it deferred
	// itself, or, for a call that needed approval, the approval's; absent
	// when there is none.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Deadline is when the orchestrator settles the call itself as failed
	// ("timed out") and refuses a later reply. The handler's context ends
	// then. Zero means none.
	Deadline time.Time `json:"deadline"`
	// Attempt is which publication of this call this is, from 1 (see
	// docs/protocol.md); JetStream's redeliveries of one publication keep
	// it.
	Attempt int `json:"attempt"`
}

// Reply is a handler's answer (wire.CallReply, field for field). A handler
// fills Outcome and Value, or Message; Content and Metadata are optional.
// The worker sets RunID, ToolCallID and WorkerID.
type Reply struct {
	// RunID and ToolCallID address the reply to its call; set by the
	// worker.
	RunID      string `json:"run_id"`
	ToolCallID string `json:"tool_call_id"`
	// Outcome is wire.OutcomeReturn (the default when empty),
	// wire.OutcomeRetry or wire.OutcomeFailed; Return, Retry and Fail
	// build them.
	Outcome wire.Outcome `json:"outcome"`
	// Value is the result of a return, a JSON value.
	Value json.RawMessage `json:"value,omitempty"`
	// Content, for a return, is extra text the model receives as a user
	// message after all tool results (Pydantic AI's ToolReturn.content).
	Content string `json:"content,omitempty"`
	// Message is what the model is told of a retry or a failure.
	Message string `json:"message,omitempty"`
	// Metadata, for a return, is a JSON object kept on the tool-return
	// part of the history and not shown to the model.
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// WorkerID is the id of the worker that answered; set by the worker.
	WorkerID string `json:"worker_id,omitempty"`
}

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
	// Name is the tool's name, as agents call it; required, a valid subject
	// token.
	Name string
	// Description and Parameters (the JSON Schema of its args) are
	// advertised; both may be empty.
	Description string
	Parameters  json.RawMessage
	// Handler runs its calls; required. A Handler that is also an
	// Advertiser says itself what to advertise.
	Handler Handler
	// Kind names the executor in the advertisement: "go" (the default),
	// or "exec", "http", "mcp", "builtin", "custom" for tool-worker's.
	Kind string
}

// Advert is what a worker advertises for a tool in the toolgate_tools
// bucket, besides its name, kind and the worker's id
// (schemas/tool_advert.schema.json).
type Advert struct {
	// Description and Parameters (the JSON Schema of its args) are shown
	// to the model of an agent that discovers the tool.
	Description string
	Parameters  json.RawMessage
	// MCPServer names the MCP server the tool comes from, MCPTool its
	// name there and Annotations its MCP annotations; for kind "mcp" only.
	MCPServer   string
	MCPTool     string
	Annotations json.RawMessage
}

// Advertiser is a Handler whose tools change while it runs (an MCP server
// whose list changes): at each renewal of the advertisements the worker
// asks it what to advertise for tool, instead of the Tool's Description
// and Parameters. ok false withdraws the worker's advertisement.
type Advertiser interface {
	Advert(tool string) (a Advert, ok bool)
}

// Config configures a Worker. The zero value serves with the defaults.
type Config struct {
	// ID names the worker in its replies and advertisements. Defaults to
	// <hostname>-<pid>.
	ID string
	// Concurrency bounds the calls running at once across all tools.
	// Defaults to 4.
	Concurrency int
	// AckWait is how long a call may go without an ack or an in-progress
	// ack before it is delivered again; in-progress acks go out every
	// AckWait/3 while a handler runs. The consumers are shared, so every
	// worker of a tool should use the same value. Defaults to 30s.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries of one call; the orchestrator then
	// fails it. Defaults to 5.
	MaxDeliver int
	// BackOff are the delays before a call whose handler returned an
	// error (not Retry nor Fail) is delivered again, by delivery number
	// (the last entry repeats). Defaults to 1s, 5s, 30s, 2m.
	BackOff []time.Duration
	// DrainTimeout bounds how long Run waits, once its context ends, for
	// calls in flight; calls still running then are cancelled and handed
	// back. Defaults to 30s.
	DrainTimeout time.Duration
	// PublishTimeout bounds the publication of one reply (retried within
	// it). Defaults to 10s.
	PublishTimeout time.Duration
	// NoAdvertise keeps the tools out of the toolgate_tools bucket.
	NoAdvertise bool
	// AdvertiseEvery is how often advertisements are renewed; keep it well
	// under the bucket's TTL. Defaults to 30s.
	AdvertiseEvery time.Duration
	// ConsumerCheckEvery is how often each tool's consumer on the server
	// is compared with the worker's configuration: a change by another
	// client is logged as an error and put back if the worker's user may.
	// Defaults to 30s.
	ConsumerCheckEvery time.Duration
	// Metrics, when set, counts every call the worker takes (see Metrics;
	// package prommetrics gives Prometheus collectors). nil counts nothing.
	Metrics Metrics
	// TracerProvider, when set, makes a consumer span per call, child of
	// the trace context in the call's headers; the reply carries the span's
	// context. nil makes no span of the worker's own: the call's trace
	// context still reaches handlers (for the Tracing middleware) and
	// replies.
	TracerProvider trace.TracerProvider
	// Logger receives the worker's log. nil discards it.
	Logger *slog.Logger
	// Clock is the clock for deadlines. Defaults to time.Now.
	Clock func() time.Time
}

func (c Config) withDefaults() Config {
	if c.ID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "worker"
		}
		c.ID = host + "-" + strconv.Itoa(os.Getpid())
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = 5
	}
	if len(c.BackOff) == 0 {
		c.BackOff = bus.DefaultBackOff()
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 10 * time.Second
	}
	if c.AdvertiseEvery <= 0 {
		c.AdvertiseEvery = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Metrics == nil {
		c.Metrics = noMetrics{}
	}
	if c.TracerProvider == nil {
		c.TracerProvider = noop.NewTracerProvider()
	}
	return c
}

func (c Config) validate() error {
	for _, d := range c.BackOff {
		if d < 0 {
			return errors.New("negative back-off delay")
		}
	}
	return nil
}

// Worker serves tool calls from JetStream. Register tools with Handle or
// Register, add middleware with Use, then Run it once.
type Worker struct {
	cfg    Config
	bus    *bus.Bus
	ownBus bool // made by New, closed by Run
	log    *slog.Logger
	tracer trace.Tracer
	slots  chan struct{} // one token per running call

	mu       sync.Mutex
	tools    []Tool
	mw       []Middleware
	running  bool
	stopping chan struct{} // closed when draining begins
	inflight int           // handlers running
	idle     chan struct{} // closed when inflight drops to 0, if someone waits

	// Tools added while running (addtool.go).
	dyn dynamicTools
	// cancels stops calls of cancelled conversations (cancel.go).
	cancels cancels
	// withdrawals skips calls withdrawn after their delivery (withdrawn.go).
	withdrawals withdrawals
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
	cfg = cfg.withDefaults()
	b, err := bus.FromConn(nc, bus.ConnConfig{Name: "toolgate-worker", Logger: cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w, err := newOnBus(b, cfg)
	if err != nil {
		return nil, err
	}
	w.ownBus = true
	return w, nil
}

func init() {
	seam.OnBus = func(b *bus.Bus, cfg any) (any, error) { return newOnBus(b, cfg.(Config)) }
}

// newOnBus returns a worker on b.
func newOnBus(b *bus.Bus, cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("worker config: %w", err)
	}
	cfg.BackOff = append([]time.Duration(nil), cfg.BackOff...)
	return &Worker{
		cfg:    cfg,
		bus:    b,
		log:    cfg.Logger.With(slog.String("component", "worker"), slog.String("worker_id", cfg.ID)),
		tracer: cfg.TracerProvider.Tracer(natstrace.InstrumentationName),
		slots:  make(chan struct{}, cfg.Concurrency),
		dyn:    dynamicTools{readvertise: make(chan struct{}, 1)},
	}, nil
}

// ID is the worker id set on replies.
func (w *Worker) ID() string { return w.cfg.ID }

// Use adds middleware around every tool's handler; the first added is the
// outermost. Middleware added after a tool started serving does not wrap
// it.
func (w *Worker) Use(mw ...Middleware) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mw = append(w.mw, mw...)
}

// Run serves calls until ctx ends, then drains: it stops fetching, lets the
// calls in flight finish within DrainTimeout, and hands back (naks) those
// that do not, so no call is lost. It returns nil after a clean drain. A
// worker runs once.
//
// At start, a consumer that cannot be created for a transient reason (a
// cluster electing a leader, streams not set up yet) is retried with
// back-off until it can or ctx ends; ending ctx then is a clean stop. A
// permission error or a rejected configuration ends Run at once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("worker: already run")
	}
	if len(w.tools) == 0 {
		w.mu.Unlock()
		return errors.New("worker: no tools registered")
	}
	w.running = true
	w.stopping = make(chan struct{})
	w.mu.Unlock()
	if w.ownBus {
		defer w.bus.Close()
	}
	return w.serve(ctx)
}
