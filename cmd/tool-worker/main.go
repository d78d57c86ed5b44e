// Command tool-worker executes toolgate's external tool calls: it pulls
// calls from JetStream, runs each through an executor and publishes the
// result.
//
//	tool-worker --builtin --sandbox ./sandbox
//	tool-worker --exec 'weather=./weather.sh --units metric' --http 'crm=https://crm.example/hook'
//
// --exec NAME=COMMAND runs COMMAND once per call (split into words like a
// shell would, without expansions: use sh -c '…' for pipes or variables),
// with the call as JSON on stdin; stdout is the result, exit 75 asks the
// model to retry, any other non-zero exit fails the call with the end of
// stderr. --http NAME=URL POSTs the call as JSON; a 2xx body is the result.
//
// --metrics ADDR serves Prometheus metrics at /metrics. Traces are exported
// when the standard OTEL_* variables ask for it (e.g.
// OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318); off by default.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/internal/worker/builtin"
	execcmd "github.com/toolgate/toolgate/internal/worker/command"
	"github.com/toolgate/toolgate/internal/worker/executor"
	"github.com/toolgate/toolgate/internal/worker/mcpexec"
	"github.com/toolgate/toolgate/internal/worker/webhook"
	"github.com/toolgate/toolgate/wire"
)

func main() { cli.Main("tool-worker", run) }

var command = cli.Command{
	Name:  "tool-worker",
	Usage: []string{"tool-worker [--builtin] [--exec NAME=COMMAND]... [--http NAME=URL]... [--mcp NAME=COMMAND|URL]... [flags]"},
	About: `Executes toolgate's external tool calls. --exec runs COMMAND once per call,
split into words like a shell would but without expansions (use sh -c '...'
for pipes or variables), with the call as JSON on stdin; its stdout is the
result (stdout that is not JSON becomes a JSON string), exit 75 asks the model
to retry, any other non-zero exit fails the call with the end of stderr.
--http POSTs the call as JSON; a 2xx body is the result.`,
	Env: append(slices.Clone(cli.NATSEnv), cli.TraceEnv...),
}

type options struct {
	nats                                 *cli.NATS
	execs, hooks, mcps, mcpPrefixes      cli.Pairs
	mcpHeaders                           cli.Pairs
	builtin, advertise, setup            bool
	sandbox, only, id, logLevel, metrics string
	concurrency                          int
	ackWait, drainTimeout                time.Duration
	httpRetries                          int
	httpBackoff                          time.Duration
}

func parseFlags(args []string, stdout io.Writer) (*options, error) {
	o := &options{}
	fs := cli.NewFlagSet(command)
	o.nats = cli.RegisterNATS(fs.FlagSet)
	fs.Var(&o.mcps, "mcp", "NAME=COMMAND (stdio) or NAME=URL (streamable HTTP): serve the tools of an MCP server (repeatable)")
	fs.Var(&o.mcpPrefixes, "mcp-prefix", "NAME=PREFIX: put PREFIX before the tool names of MCP server NAME")
	fs.Var(&o.mcpHeaders, "mcp-header", "NAME=Key:Value or NAME=Key:@FILE: send this header to MCP server NAME over HTTP, e.g. a bearer token read from FILE (repeatable)")
	fs.BoolVar(&o.builtin, "builtin", false, "serve the built-in demo tools ("+strings.Join(builtinNames(), ", ")+")")
	fs.StringVar(&o.sandbox, "sandbox", "./sandbox", "folder the built-in file tools work in")
	fs.Var(&o.execs, "exec", "NAME=COMMAND: serve tool NAME by running COMMAND per call (repeatable)")
	fs.Var(&o.hooks, "http", "NAME=URL: serve tool NAME by POSTing each call to URL (repeatable)")
	fs.IntVar(&o.httpRetries, "http-retries", webhook.DefaultRetries, "how often --http POSTs a call again after a 408, 429 or 5xx answer or no connection, before the call fails with the last answer (0: never)")
	fs.DurationVar(&o.httpBackoff, "http-backoff", webhook.DefaultBackoff, "--http's wait before its first retry, doubled at each next one up to 30s; an answer's Retry-After wins")
	fs.StringVar(&o.only, "tools", "", "serve only these tools, comma-separated (default: every configured tool)")
	fs.IntVar(&o.concurrency, "concurrency", 4, "calls running at once, across all tools")
	fs.StringVar(&o.id, "id", cli.DefaultID("", strconv.Itoa(os.Getpid())), "worker id, set on every reply")
	fs.DurationVar(&o.ackWait, "ack-wait", 30*time.Second, "ack wait of the call consumers; in-progress acks go out every third of it")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM, how long calls in flight may take to finish before they are handed back")
	fs.BoolVar(&o.advertise, "advertise", true, "advertise the served tools in the toolgate_tools bucket")
	fs.BoolVar(&o.setup, "setup", false, "create toolgate's streams and buckets if missing (normally the orchestrator does)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics at /metrics on this address, e.g. 127.0.0.1:9464 (off by default)")
	pos, err := fs.Parse(args, stdout)
	if err != nil {
		return nil, err
	}
	if len(pos) != 0 {
		return nil, cli.Usagef(command.Name, "unexpected argument %q", pos[0])
	}
	if o.concurrency < 1 {
		return nil, errors.New("--concurrency must be at least 1")
	}
	if o.httpRetries < 0 {
		return nil, errors.New("--http-retries must not be negative")
	}
	if o.httpBackoff <= 0 {
		return nil, errors.New("--http-backoff must be positive")
	}
	return o, o.nats.Check()
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	logger, err := cli.Logger(stderr, o.logLevel, "log-level")
	if err != nil {
		return err
	}
	tools, mcpServers, err := configureTools(ctx, o, logger)
	defer func() {
		for _, m := range mcpServers {
			_ = m.Close()
		}
	}()
	if err != nil {
		return err
	}
	flushTraces, err := telemetry.StartTracing(ctx, "tool-worker", os.Getenv, logger)
	if err != nil {
		return err
	}
	defer flushTraces()
	// Listen before connecting, so that a bad address fails at once.
	reg := telemetry.NewRegistry()
	var metrics *telemetry.WorkerMetrics
	var metricsLn net.Listener
	if o.metrics != "" {
		if metricsLn, err = net.Listen("tcp", o.metrics); err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		defer metricsLn.Close()
		metrics = telemetry.NewWorkerMetrics(reg)
	}
	b, err := connect(ctx, o, logger)
	if err != nil {
		return err
	}
	// Closed after Run has drained: the last replies and acks go out first.
	defer b.Close()
	if metrics != nil {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "toolgate_worker_consumer_drifts_total",
			Help: "Times a call consumer of this worker was found with a configuration other than its own: changed by another client (logged as an error).",
		}, func() float64 { return float64(b.ConsumerDrifts()) }))
	}
	w, err := worker.New(worker.Config{
		Bus: b, Tools: tools, ID: o.id, Concurrency: o.concurrency, AckWait: o.ackWait,
		DrainTimeout: o.drainTimeout, Advertise: o.advertise, Logger: logger, Metrics: metrics,
	})
	if err != nil {
		return err
	}
	for _, m := range mcpServers {
		m.Bind(w)
	}
	logger.Info("tool-worker starting", slog.String("id", w.ID()), slog.String("tools", strings.Join(toolNames(tools), ",")))
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.Run(gctx) })
	if metricsLn != nil {
		g.Go(func() error { return telemetry.ServeListener(gctx, metricsLn, reg) })
		logger.Info("serving metrics", slog.String("addr", metricsLn.Addr().String()))
	}
	return g.Wait()
}

func connect(ctx context.Context, o *options, logger *slog.Logger) (*bus.Bus, error) {
	b, err := o.nats.Connect(ctx, "tool-worker-"+o.id, bus.RoleWorker, logger)
	if err != nil {
		return nil, err
	}
	if o.setup {
		sctx, cancel := context.WithTimeout(ctx, o.nats.ConnectTimeout)
		defer cancel()
		if err := b.Setup(sctx, bus.SetupConfig{}); err != nil {
			b.Close()
			return nil, err
		}
	}
	return b, nil
}

// configureTools builds the tools of --builtin, --exec, --http and --mcp,
// keeping those --tools names. The MCP servers it returns are to be closed
// even on an error.
func configureTools(ctx context.Context, o *options, logger *slog.Logger) ([]executor.Tool, []*mcpexec.Server, error) {
	var tools []executor.Tool
	if o.builtin {
		b, err := builtin.New(o.sandbox)
		if err != nil {
			return nil, nil, err
		}
		for _, s := range builtin.Tools() {
			tools = append(tools, executor.Tool{Spec: s, Executor: b, Kind: "builtin"})
		}
		logger.Info("built-in tools", slog.String("sandbox", b.Sandbox()))
	}
	for _, v := range o.execs {
		name, command, err := splitPair("exec", v)
		if err != nil {
			return nil, nil, err
		}
		c, err := execcmd.New(command)
		if err != nil {
			return nil, nil, fmt.Errorf("--exec %s: %w", name, err)
		}
		tools = append(tools, executor.Tool{Spec: executor.ToolSpec{Name: name}, Executor: c, Kind: "exec"})
	}
	for _, v := range o.hooks {
		name, url, err := splitPair("http", v)
		if err != nil {
			return nil, nil, err
		}
		if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
			return nil, nil, fmt.Errorf("--http %s: %q is not an http(s) URL", name, url)
		}
		hook := &webhook.Webhook{URL: url, Retries: o.httpRetries, Backoff: o.httpBackoff, Logger: logger}
		if o.httpRetries == 0 {
			hook.Retries = -1 // Webhook's zero is its default
		}
		tools = append(tools, executor.Tool{Spec: executor.ToolSpec{Name: name}, Executor: hook, Kind: "http"})
	}
	servers, err := startMCP(ctx, o, logger)
	for _, m := range servers {
		tools = append(tools, m.Tools()...)
	}
	if err != nil {
		return nil, servers, err
	}
	if o.only != "" {
		if tools, err = selectTools(tools, o.only); err != nil {
			return nil, servers, err
		}
	}
	if len(tools) == 0 {
		return nil, servers, errors.New("no tools to serve: give --builtin, --exec, --http or --mcp")
	}
	return tools, servers, nil
}

func splitPair(flagName, v string) (name, value string, err error) {
	name, value, ok := strings.Cut(v, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.TrimSpace(value) == "" {
		return "", "", fmt.Errorf("--%s %q: want NAME=VALUE", flagName, v)
	}
	if err := wire.ValidateToken("tool name", name); err != nil {
		return "", "", fmt.Errorf("--%s: %w", flagName, err)
	}
	return name, value, nil
}

// selectTools keeps the tools named in list, refusing names not configured.
func selectTools(tools []executor.Tool, list string) ([]executor.Tool, error) {
	var out []executor.Tool
	for n := range strings.SplitSeq(list, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		i := slices.IndexFunc(tools, func(t executor.Tool) bool { return t.Spec.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("--tools: %s is not configured", n)
		}
		out = append(out, tools[i])
	}
	return out, nil
}

func toolNames(tools []executor.Tool) []string {
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Spec.Name
	}
	return names
}

func builtinNames() []string {
	var names []string
	for _, s := range builtin.Tools() {
		names = append(names, s.Name)
	}
	return names
}
