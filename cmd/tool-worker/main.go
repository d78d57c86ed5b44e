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
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "tool-worker:", err)
		os.Exit(1)
	}
}

// pairs collects repeated NAME=VALUE flags.
type pairs []string

func (p *pairs) String() string     { return strings.Join(*p, ",") }
func (p *pairs) Set(v string) error { *p = append(*p, v); return nil }

func splitPair(flagName, v string) (name, value string, err error) {
	name, value, ok := strings.Cut(v, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.TrimSpace(value) == "" {
		return "", "", fmt.Errorf("--%s %q: want NAME=VALUE", flagName, v)
	}
	if err := bus.ValidateToken("tool name", name); err != nil {
		return "", "", fmt.Errorf("--%s: %w", flagName, err)
	}
	return name, value, nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("tool-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var execs, hooks, mcps, mcpPrefixes, mcpHeaders pairs
	fs.Var(&mcps, "mcp", "NAME=COMMAND (stdio) or NAME=URL (streamable HTTP): serve the tools of an MCP server (repeatable)")
	fs.Var(&mcpPrefixes, "mcp-prefix", "NAME=PREFIX: put PREFIX before the tool names of MCP server NAME")
	fs.Var(&mcpHeaders, "mcp-header", "NAME=Key:Value or NAME=Key:@FILE: send this header to MCP server NAME over HTTP, e.g. a bearer token read from FILE (repeatable)")
	natsURL := fs.String("nats", envOr("TOOLGATE_NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL(s), comma-separated (env TOOLGATE_NATS_URL)")
	builtin := fs.Bool("builtin", false, "serve the built-in demo tools ("+strings.Join(builtinNames(), ", ")+")")
	sandbox := fs.String("sandbox", "./sandbox", "folder the built-in file tools work in")
	fs.Var(&execs, "exec", "NAME=COMMAND: serve tool NAME by running COMMAND per call (repeatable)")
	fs.Var(&hooks, "http", "NAME=URL: serve tool NAME by POSTing each call to URL (repeatable)")
	only := fs.String("tools", "", "serve only these tools, comma-separated (default: every configured tool)")
	concurrency := fs.Int("concurrency", 4, "calls running at once, across all tools")
	id := fs.String("id", defaultID(), "worker id, set on every reply")
	user := fs.String("user", "", "NATS user")
	password := fs.String("password", bus.TakeEnvPassword(), "NATS password (env TOOLGATE_NATS_PASSWORD); --password-file keeps it from the programs the worker runs")
	passwordFile := fs.String("password-file", "", "file holding the NATS password; overrides --password")
	creds := fs.String("creds", "", "NATS credentials file; overrides --user/--password")
	ackWait := fs.Duration("ack-wait", 30*time.Second, "ack wait of the call consumers; in-progress acks go out every third of it")
	drainTimeout := fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM, how long calls in flight may take to finish before they are handed back")
	advertise := fs.Bool("advertise", true, "advertise the served tools in the toolgate_tools bucket")
	setup := fs.Bool("setup", false, "create toolgate's streams and buckets if missing (normally the orchestrator does)")
	connectTimeout := fs.Duration("connect-timeout", 30*time.Second, "how long to wait for the NATS server")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics at /metrics on this address, e.g. 127.0.0.1:9464 (off by default)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: tool-worker [--builtin] [--exec NAME=COMMAND]... [--http NAME=URL]... [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))
	if *concurrency < 1 {
		return errors.New("--concurrency must be at least 1")
	}

	var tools []worker.Tool
	if *builtin {
		b, err := worker.NewBuiltin(*sandbox)
		if err != nil {
			return err
		}
		for _, s := range worker.BuiltinTools() {
			tools = append(tools, worker.Tool{Spec: s, Executor: b, Kind: "builtin"})
		}
		logger.Info("built-in tools", slog.String("sandbox", b.Sandbox()))
	}
	for _, v := range execs {
		name, command, err := splitPair("exec", v)
		if err != nil {
			return err
		}
		c, err := worker.NewCommand(command)
		if err != nil {
			return fmt.Errorf("--exec %s: %w", name, err)
		}
		tools = append(tools, worker.Tool{Spec: worker.ToolSpec{Name: name}, Executor: c, Kind: "exec"})
	}
	for _, v := range hooks {
		name, url, err := splitPair("http", v)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
			return fmt.Errorf("--http %s: %q is not an http(s) URL", name, url)
		}
		tools = append(tools, worker.Tool{Spec: worker.ToolSpec{Name: name}, Executor: &worker.Webhook{URL: url}, Kind: "http"})
	}
	prefixes := map[string]string{}
	for _, v := range mcpPrefixes {
		name, p, err := splitPair("mcp-prefix", v)
		if err != nil {
			return err
		}
		prefixes[name] = p
	}
	headers := map[string]http.Header{}
	for _, v := range mcpHeaders {
		name, spec, err := splitPair("mcp-header", v)
		if err != nil {
			return err
		}
		if headers[name] == nil {
			headers[name] = http.Header{}
		}
		if err := worker.AddMCPHeader(headers[name], spec); err != nil {
			return fmt.Errorf("--mcp-header %s: %w", name, err)
		}
	}
	for name := range headers {
		if !slices.ContainsFunc(mcps, func(v string) bool { n, _, _ := strings.Cut(v, "="); return strings.TrimSpace(n) == name }) {
			return fmt.Errorf("--mcp-header %s: no --mcp %s=URL to send it to", name, name)
		}
	}
	var mcpServers []*worker.MCPServer
	defer func() {
		for _, m := range mcpServers {
			_ = m.Close()
		}
	}()
	for _, v := range mcps {
		name, target, err := splitPair("mcp", v)
		if err != nil {
			return err
		}
		cfg := worker.MCPConfig{Name: name, Prefix: prefixes[name], Logger: logger}
		if strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://") {
			cfg.URL, cfg.Header = target, headers[name]
		} else if headers[name] != nil {
			return fmt.Errorf("--mcp-header %s: server %s is a command, not a URL", name, name)
		} else if cfg.Command, err = worker.SplitWords(target); err != nil {
			return fmt.Errorf("--mcp %s: %w", name, err)
		}
		m, err := worker.NewMCPServer(ctx, cfg)
		if err != nil {
			return fmt.Errorf("--mcp %s: %w", name, err)
		}
		mcpServers = append(mcpServers, m)
		tools = append(tools, m.Tools()...)
	}
	if *only != "" {
		var err error
		if tools, err = selectTools(tools, *only); err != nil {
			return err
		}
	}
	if len(tools) == 0 {
		return errors.New("no tools to serve: give --builtin, --exec or --http")
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
	if *metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", *metricsAddr); err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		defer metricsLn.Close()
		metrics = telemetry.NewWorkerMetrics(reg)
	}

	cctx, cancel := context.WithTimeout(ctx, *connectTimeout)
	b, err := bus.Connect(cctx, bus.ConnConfig{
		URL: *natsURL, Name: "tool-worker-" + *id,
		User: *user, Password: *password, PasswordFile: *passwordFile, CredsFile: *creds, Role: bus.RoleWorker,
		Logger: logger,
	})
	if err == nil && *setup {
		err = b.Setup(cctx, bus.SetupConfig{})
	}
	cancel()
	if err != nil {
		if b != nil {
			b.Close()
		}
		return err
	}
	// Closed after Run has drained: the last replies and acks go out first.
	defer b.Close()

	w, err := worker.New(worker.Config{
		Bus:          b,
		Tools:        tools,
		ID:           *id,
		Concurrency:  *concurrency,
		AckWait:      *ackWait,
		DrainTimeout: *drainTimeout,
		Advertise:    *advertise,
		Logger:       logger,
		Metrics:      metrics,
	})
	if err != nil {
		return err
	}
	for _, m := range mcpServers {
		m.Bind(w)
	}
	names := make([]string, len(tools))
	for i, t := range tools {
		names[i] = t.Spec.Name
	}
	logger.Info("tool-worker starting", slog.String("id", w.ID()), slog.String("tools", strings.Join(names, ",")))
	if metricsLn == nil {
		return w.Run(ctx)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.Run(gctx) })
	g.Go(func() error { return telemetry.ServeListener(gctx, metricsLn, reg) })
	logger.Info("serving metrics", slog.String("addr", metricsLn.Addr().String()))
	return g.Wait()
}

// selectTools keeps the tools named in list, refusing names not configured.
func selectTools(tools []worker.Tool, list string) ([]worker.Tool, error) {
	var want []string
	for n := range strings.SplitSeq(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want = append(want, n)
		}
	}
	var out []worker.Tool
	for _, n := range want {
		i := slices.IndexFunc(tools, func(t worker.Tool) bool { return t.Spec.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("--tools: %s is not configured", n)
		}
		out = append(out, tools[i])
	}
	return out, nil
}

func builtinNames() []string {
	var names []string
	for _, s := range worker.BuiltinTools() {
		names = append(names, s.Name)
	}
	return names
}

func defaultID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
