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
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/orchestrator"
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
	maxRuns                                                                    int
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
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long runs in progress may take to finish")
	fs.IntVar(&o.maxRuns, "max-runs", 16, "runs executing at once")
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
	if o.sync != "always" && o.sync != "default" {
		return o, fmt.Errorf("--sync %q: want always or default", o.sync)
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
	if err := orchestrator.CheckListen(o.httpAddr, token != ""); err != nil {
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

	// The bus: an embedded server, or a connection to one.
	var srv *bus.Server
	var b *bus.Bus
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if o.natsURL == "" {
		srv, err = bus.StartServer(bus.ServerConfig{StoreDir: o.store, Listen: o.natsListen, SyncAlways: o.sync == "always", Logger: logger})
		if err != nil {
			return err
		}
		defer srv.Shutdown()
		logger.Info("embedded NATS server", slog.String("url", srv.ClientURL()), slog.String("store", o.store), slog.String("sync", o.sync))
		b, err = srv.Connect(cctx, bus.ConnConfig{Name: "orchestrator", Logger: logger})
	} else {
		b, err = bus.Connect(cctx, bus.ConnConfig{URL: o.natsURL, Name: "orchestrator", Logger: logger})
	}
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Setup(cctx, bus.SetupConfig{}); err != nil {
		return err
	}

	orch, err := orchestrator.New(orchestrator.Config{
		Bus: b, Agent: agentCfg, LookupEnv: lookupEnv, TrustedApprovers: trusted,
		MaxConcurrentRuns: o.maxRuns, Logger: logger,
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
	hs := &http.Server{
		Handler:           orch.Handler(orchestrator.HandlerConfig{Token: token, Logger: logger}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	logger.Info("orchestrator serving", slog.String("http", "http://"+ln.Addr().String()), slog.Bool("auth", token != ""))

	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	// Shutdown order: stop HTTP, stop consuming, wait for runs (bounded),
	// then the deferred calls close the bus and the embedded server.
	logger.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if herr := hs.Shutdown(sctx); herr != nil {
		_ = hs.Close()
	}
	stopOrch(orch, o.shutdownTimeout, logger)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func stopOrch(orch *orchestrator.Orchestrator, timeout time.Duration, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := orch.Stop(ctx); err != nil {
		logger.Warn("stop", slog.String("error", err.Error()))
	}
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
