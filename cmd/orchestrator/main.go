// Command orchestrator runs toolgate's orchestrator: the agent loop, the
// paused conversations in KV, the batches of deferred calls on the bus, and
// the HTTP API.
//
//	orchestrator                                  # embedded NATS, built-in demo agent
//	orchestrator --agent examples/agent-openai.yaml --nats nats://127.0.0.1:4222
//
// Without --agent it runs the built-in demo (the seed's approval example on
// a script model), or, when OPENAI_API_KEY is set, the same tools on the
// OpenAI model OPENAI_MODEL (default gpt-4o-mini) at OPENAI_BASE_URL.
//
// Prometheus metrics are served at GET /metrics on the --http address; when
// --http-token-file is set a scraper must send the token as a bearer token,
// like any API client. Traces are exported over OTLP when the standard
// OTEL_* variables ask for it (OTEL_EXPORTER_OTLP_ENDPOINT).
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/web"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, os.LookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
}

// pairs collects repeated NAME=VALUE flags.
type pairs []string

func (p *pairs) String() string     { return strings.Join(*p, ",") }
func (p *pairs) Set(v string) error { *p = append(*p, v); return nil }

type options struct {
	natsURL, natsListen, store, sync, httpAddr, agentFile, tokenFile, logLevel string
	trust                                                                      pairs
	shutdownTimeout                                                            time.Duration
	leaseTTL, reconcileInterval, replyAckWait, retention                       time.Duration
	maxRuns                                                                    int
	replicas                                                                   int
	// contentType of the calls, approval requests and events published
	// (--wire).
	contentType string

	// NATS authentication: users of the embedded server, or this process's
	// own credentials.
	natsUsers, writeNATSConfig, user, password, creds string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("orchestrator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.natsURL, "nats", "", "NATS server URL(s); empty runs an embedded server")
	fs.StringVar(&o.natsListen, "nats-listen", "127.0.0.1:4222", "client address of the embedded server (embedded only)")
	fs.StringVar(&o.store, "store", "./data", "JetStream store folder of the embedded server")
	fs.StringVar(&o.sync, "sync", "default", "embedded file store fsync: always (every write) or default (every 2 minutes; a machine crash can lose the last writes)")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8080", "HTTP API address; a non-loopback address needs --http-token-file")
	fs.StringVar(&o.agentFile, "agent", "", "agent config (YAML or JSON); empty: the built-in demo")
	fs.Var(&o.trust, "trust-approver", "NAME=PUBKEY: accept decisions of approver NAME only when signed by this base64 ed25519 key (repeatable; none: decisions are not signature-checked)")
	fs.StringVar(&o.tokenFile, "http-token-file", "", "file holding the bearer token the HTTP API requires")
	fs.StringVar(&o.natsUsers, "nats-users", "", "users file (YAML: users: [{name, password, role}], role orchestrator, worker or approver): the embedded server admits only these users, each limited to its role's subjects; required to listen beyond loopback")
	fs.StringVar(&o.writeNATSConfig, "write-nats-config", "", "write the --nats-users users as a nats-server authorization block to this file (for the servers of a cluster) and exit")
	fs.StringVar(&o.user, "user", "", "NATS user: with --nats, or which orchestrator user of --nats-users to connect as (default: the first)")
	fs.StringVar(&o.password, "password", "", "NATS password, with --nats --user (env TOOLGATE_NATS_PASSWORD)")
	fs.StringVar(&o.creds, "creds", "", "NATS credentials file, with --nats; overrides --user/--password")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long runs in progress may take to finish")
	fs.IntVar(&o.maxRuns, "max-runs", 16, "runs executing at once")
	fs.IntVar(&o.replicas, "replicas", 1, "replicas of toolgate's streams and KV buckets when they are created: 1 on a single server, 3 in a cluster")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 30*time.Second, "how long a run's lease lasts unrenewed; a run whose orchestrator died is relaunched after it")
	fs.DurationVar(&o.reconcileInterval, "reconcile-interval", 15*time.Second, "how often stored conversations are scanned for work a dead or stopped replica left undone")
	wireForm := fs.String("wire", "msgpack", "body encoding of the calls, approval requests and events it publishes: msgpack, or json for workers and approvers that read only JSON (every reader accepts both)")
	fs.DurationVar(&o.retention, "retention", 30*24*time.Hour, "finished (completed, failed, cancelled) conversations are deleted this long after their last change; audit records stay. 0 keeps them")
	fs.DurationVar(&o.replyAckWait, "reply-ack-wait", 30*time.Second, "ack wait of the replies consumer: a reply a dead replica was handling is delivered again after it")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: orchestrator [flags]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() != 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch *wireForm {
	case "msgpack":
		o.contentType = bus.ContentTypeMsgpack
	case "json":
		o.contentType = bus.ContentTypeJSON
	default:
		return o, fmt.Errorf("--wire %q: want msgpack or json", *wireForm)
	}
	if o.sync != "always" && o.sync != "default" {
		return o, fmt.Errorf("--sync %q: want always or default", o.sync)
	}
	if o.retention < 0 {
		return o, fmt.Errorf("--retention %s: must not be negative (0 keeps finished conversations)", o.retention)
	}
	if o.replicas < 1 || o.replicas > 5 {
		return o, fmt.Errorf("--replicas %d: want 1 to 5", o.replicas)
	}
	if o.natsURL != "" && o.natsUsers != "" {
		return o, errors.New("--nats-users configures the embedded server: with --nats, give the server those users (see --write-nats-config) and connect with --user/--password or --creds")
	}
	if o.writeNATSConfig != "" && o.natsUsers == "" {
		return o, errors.New("--write-nats-config needs --nats-users")
	}
	return o, nil
}

func run(ctx context.Context, args []string, stderr io.Writer, lookupEnv func(string) (string, bool)) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	natsAuth, err := natsAuthOf(o, lookupEnv)
	if err != nil {
		return err
	}
	if o.writeNATSConfig != "" {
		if err := os.WriteFile(o.writeNATSConfig, []byte(bus.ServerConfigBlock(natsAuth.users)), 0o600); err != nil {
			return fmt.Errorf("--write-nats-config: %w", err)
		}
		logger.Info("nats-server authorization written", slog.String("file", o.writeNATSConfig), slog.Int("users", len(natsAuth.users)))
		return nil
	}

	token := ""
	if o.tokenFile != "" {
		b, err := os.ReadFile(o.tokenFile)
		if err != nil {
			return fmt.Errorf("--http-token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			return fmt.Errorf("--http-token-file %s is empty", o.tokenFile)
		}
	}
	if err := web.CheckListen(o.httpAddr, token != ""); err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	trusted, err := parseTrust(o.trust)
	if err != nil {
		return err
	}
	agentCfg, err := loadAgent(o.agentFile, lookupEnv, logger)
	if err != nil {
		return err
	}

	flushTraces, err := telemetry.StartTracing(ctx, "orchestrator", os.Getenv, logger)
	if err != nil {
		return err
	}
	defer flushTraces()
	// Served at /metrics on the --http address, behind its token.
	reg := telemetry.NewRegistry()
	metrics := telemetry.NewOrchestratorMetrics(reg)

	// The bus: an embedded server, or a connection to one. Events go on a
	// second connection, so that a busy run's events are not queued ahead
	// of its state writes and calls.
	var srv *embedded.Server
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	connect := func(name string) (*bus.Bus, error) {
		cfg := bus.ConnConfig{URL: o.natsURL, Name: name, User: natsAuth.user, Password: natsAuth.password, CredsFile: o.creds, Logger: logger, ContentType: o.contentType}
		if srv != nil {
			cfg.CredsFile = ""
			return srv.Connect(cctx, cfg)
		}
		return bus.Connect(cctx, cfg)
	}
	if o.natsURL == "" {
		srv, err = embedded.StartServer(embedded.ServerConfig{StoreDir: o.store, Listen: o.natsListen, SyncAlways: o.sync == "always", Users: natsAuth.users, Logger: logger})
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		logger.Info("embedded NATS server", slog.String("url", srv.ClientURL()), slog.String("store", o.store), slog.String("sync", o.sync))
	}
	b, err := connect("orchestrator")
	if err != nil {
		return err
	}
	defer b.Close()
	eb, err := connect("orchestrator-events")
	if err != nil {
		return err
	}
	defer eb.Close()
	if err := b.Setup(cctx, bus.SetupConfig{Replicas: o.replicas}); err != nil {
		return err
	}

	orch, err := orchestrator.New(orchestrator.Config{
		Bus: b, EventBus: eb, Agent: agentCfg, LookupEnv: lookupEnv, TrustedApprovers: trusted,
		MaxConcurrentRuns: o.maxRuns, Logger: logger, Metrics: metrics,
		LeaseTTL: o.leaseTTL, ReconcileInterval: o.reconcileInterval, ReplyAckWait: o.replyAckWait, Retention: o.retention,
	})
	if err != nil {
		return err
	}
	if err := orch.Start(cctx); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		stopOrch(orch, o.shutdownTimeout, logger)
		return fmt.Errorf("--http: %w", err)
	}
	logger.Info("orchestrator serving", slog.String("http", "http://"+ln.Addr().String()), slog.Bool("auth", token != ""))
	// Shutdown order: stop HTTP (Serve returns once ctx ends and requests
	// are done), stop consuming, wait for runs (bounded), then the deferred
	// calls close the bus and the embedded server.
	err = web.Serve(ctx, ln, orch.Handler(orchestrator.HandlerConfig{Token: token, Logger: logger, Metrics: telemetry.Handler(reg)}),
		web.ServeConfig{Logger: logger})
	logger.Info("shutting down")
	stopOrch(orch, o.shutdownTimeout, logger)
	return err
}

func stopOrch(orch *orchestrator.Orchestrator, timeout time.Duration, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := orch.Stop(ctx); err != nil {
		logger.Warn("stop", slog.String("error", err.Error()))
	}
}

// natsAuth is how the orchestrator authenticates to NATS and, for the
// embedded server, which users it admits.
type natsAuth struct {
	users          []bus.User
	user, password string
}

// natsAuthOf reads --nats-users and picks this process's credentials: an
// orchestrator user of the file for the embedded server, --user/--password
// for another server. An embedded server without users must stay on
// loopback, like the HTTP API without a token.
func natsAuthOf(o options, lookupEnv func(string) (string, bool)) (natsAuth, error) {
	var a natsAuth
	if o.natsUsers == "" {
		if o.natsURL == "" && o.user != "" {
			return a, errors.New("--user needs --nats, or --nats-users for the embedded server")
		}
		if o.natsURL == "" {
			if web.CheckListen(o.natsListen, false) != nil {
				return a, fmt.Errorf("--nats-listen %s is not loopback: give the server users (--nats-users) to listen there", o.natsListen)
			}
		}
		a.user, a.password = o.user, o.password
		if a.password == "" {
			a.password, _ = lookupEnv("TOOLGATE_NATS_PASSWORD")
		}
		return a, nil
	}
	users, err := bus.LoadUsers(o.natsUsers)
	if err != nil {
		return a, fmt.Errorf("--nats-users: %w", err)
	}
	a.users = users
	for _, u := range users {
		if u.Role == bus.RoleOrchestrator && (o.user == "" || o.user == u.Name) {
			a.user, a.password = u.Name, u.Password
			return a, nil
		}
	}
	if o.user != "" {
		return a, fmt.Errorf("--user %s: no such orchestrator user in %s", o.user, o.natsUsers)
	}
	return a, fmt.Errorf("--nats-users %s: no user with role %s, which the orchestrator needs", o.natsUsers, bus.RoleOrchestrator)
}

func parseTrust(list pairs) (map[string]ed25519.PublicKey, error) {
	out := map[string]ed25519.PublicKey{}
	for _, v := range list {
		name, key, ok := strings.Cut(v, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("--trust-approver %q: want NAME=PUBKEY", v)
		}
		if err := bus.ValidateToken("approver name", name); err != nil {
			return nil, fmt.Errorf("--trust-approver: %w", err)
		}
		pub, err := approver.ParsePublicKey(key)
		if err != nil {
			return nil, fmt.Errorf("--trust-approver %s: %w", name, err)
		}
		out[name] = pub
	}
	return out, nil
}

// loadAgent reads --agent, or builds the demo: on the script model, or on
// OpenAI when OPENAI_API_KEY is set.
func loadAgent(file string, lookupEnv func(string) (string, bool), logger *slog.Logger) (*orchestrator.AgentConfig, error) {
	if file != "" {
		return orchestrator.LoadAgentConfig(file)
	}
	cfg, err := orchestrator.DemoAgentConfig()
	if err != nil {
		return nil, err
	}
	if key, ok := lookupEnv("OPENAI_API_KEY"); ok && key != "" {
		model, _ := lookupEnv("OPENAI_MODEL")
		if model == "" {
			model = "gpt-4o-mini"
		}
		base, _ := lookupEnv("OPENAI_BASE_URL")
		cfg.Model = orchestrator.ModelConfig{Provider: orchestrator.ProviderOpenAI, Name: model, BaseURL: base, APIKey: key}
		cfg.Script = nil
		logger.Info("demo agent on OpenAI", slog.String("model", model))
	} else {
		logger.Info("demo agent on the script model (set OPENAI_API_KEY for a real model)")
	}
	return cfg, nil
}
