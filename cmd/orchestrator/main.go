// Command orchestrator runs toolgate's orchestrator: the agent loop, the
// conversations' logs on JetStream, the batches of deferred calls on the bus, and
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
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/api/site"
	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/bus/usersfile"
	"github.com/toolgate/toolgate/internal/chat"
	"github.com/toolgate/toolgate/internal/chat/page"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/web"
	"github.com/toolgate/toolgate/wire"
)

func main() {
	cli.Main("orchestrator", func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return run(ctx, args, stdout, stderr, os.LookupEnv)
	})
}

var command = cli.Command{
	Name:  "orchestrator",
	Usage: []string{"orchestrator [flags]"},
	About: `Runs the agent loop, keeps each conversation as a log on JetStream, publishes
deferred calls and approval requests on NATS, and serves the HTTP API (and /metrics). Without
--nats it runs an embedded NATS server; without --agent, the built-in demo.`,
	Env: append([]cli.Env{
		{Name: "OPENAI_API_KEY", Doc: "without --agent: run the demo on this OpenAI-compatible API instead of the script model"},
		{Name: "OPENAI_MODEL", Doc: "the demo's model (default gpt-4o-mini)"},
		{Name: "OPENAI_BASE_URL", Doc: "the demo's API base URL (default api.openai.com)"},
		{Name: "TOOLGATE_NATS_PASSWORD", Doc: "default of --password"},
	}, cli.TraceEnv...),
}

type options struct {
	natsURL, natsListen, store, sync, httpAddr, tokenFile, logLevel   string
	httpUsers                                                         string
	agentFiles                                                        cli.Pairs
	agentWait                                                         time.Duration
	trust                                                             cli.Pairs
	allowUnsigned                                                     bool
	shutdownTimeout                                                   time.Duration
	leaseTTL, reconcileInterval, replyAckWait, retention, claimWindow time.Duration
	maxRuns                                                           int
	// stateCacheMiB is orchestrator.Config.StateCacheBytes in MiB; 0: its
	// default.
	stateCacheMiB int
	// storeMinFreeMiB is the embedded store's MinFreeBytes, in MiB.
	storeMinFreeMiB int
	// streamReplicas are the replicas of the streams and KV buckets it
	// creates (--stream-replicas; not the orchestrator's own replicas,
	// which are processes).
	streamReplicas int
	// replyPartitions are the partitions of the replies stream when it is
	// created (bus.SetupConfig.ReplyPartitions; 0: none).
	replyPartitions int
	// warnings are said once the logger exists: deprecated flags used.
	warnings []string
	// contentType of the calls, approval requests and events published
	// (--wire).
	contentType string

	// NATS authentication: users of the embedded server, or this process's
	// own credentials.
	natsUsers, writeNATSConfig, user, password, creds string
}

func parseFlags(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := cli.NewFlagSet(command)
	fs.StringVar(&o.natsURL, "nats", "", "NATS server URL(s); empty runs an embedded server")
	fs.StringVar(&o.natsListen, "nats-listen", "127.0.0.1:4222", "client address of the embedded server (embedded only)")
	fs.StringVar(&o.store, "store", "./data", "JetStream store folder of the embedded server")
	fs.StringVar(&o.sync, "sync", "default", "embedded file store fsync: always (every write) or default (every 2 minutes; a machine crash can lose the last writes)")
	fs.IntVar(&o.storeMinFreeMiB, "store-min-free", embedded.DefaultMinFreeBytes>>20, "MiB that must be free on the embedded store's disk before a store that filled it is reopened (embedded only)")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:8080", "HTTP API address; a non-loopback address needs --http-token-file")
	fs.Var(&o.agentFiles, "agent", "agent config (YAML or JSON), or a directory of them (every *.yaml, *.yml, *.json); repeatable, for several agents, each named by its name: or its file's base name; none: the built-in demo")
	fs.DurationVar(&o.agentWait, "agent-wait", 10*time.Minute, "how long a conversation that needs a run waits for a replica running its agent (an agent_unavailable event says it waits) before it fails")
	fs.Var(&o.trust, "trust-approver", "NAME=PUBKEY: accept decisions of approver NAME only when signed by this base64 ed25519 key (repeatable); the default of the agent files that have no trust: (a file's trust: wins); none: decisions are not signature-checked")
	fs.BoolVar(&o.allowUnsigned, "allow-unsigned", false, "start even though the HTTP API or NATS listens beyond loopback and an agent takes unsigned decisions (no trust keys)")
	fs.StringVar(&o.tokenFile, "http-token-file", "", "file holding the bearer token the HTTP API requires")
	fs.StringVar(&o.httpUsers, "http-users", "", "users file (YAML: users: [{name, token_sha256}]): the HTTP API admits each user's bearer token and records the user's name on the decisions it gives")
	fs.StringVar(&o.natsUsers, "nats-users", "", "users file (YAML: users: [{name, password, role}], role orchestrator, worker or approver): the embedded server admits only these users, each limited to its role's subjects; required to listen beyond loopback")
	fs.StringVar(&o.writeNATSConfig, "write-nats-config", "", "write the --nats-users users as a nats-server authorization block to this file (for the servers of a cluster) and exit")
	fs.StringVar(&o.user, "user", "", "NATS user: with --nats, or which orchestrator user of --nats-users to connect as (default: the first)")
	fs.StringVar(&o.password, "password", "", "NATS password, with --nats --user")
	fs.StringVar(&o.creds, "creds", "", "NATS credentials file, with --nats; overrides --user/--password")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "on SIGTERM, how long runs in progress may take to finish")
	fs.IntVar(&o.maxRuns, "max-runs", 16, "runs executing at once")
	fs.IntVar(&o.stateCacheMiB, "state-cache", 0, "MiB of heap for the states of conversations kept decoded (about 3 KB each for a paused conversation of a few calls; one pushed out is read from its log when resumed, and toolgate_state_cache_evictions_total counts it); 0: a quarter of GOMEMLIMIT when set, else 256")
	fs.IntVar(&o.streamReplicas, "stream-replicas", 1, "replicas NATS keeps of toolgate's streams and KV buckets when they are created: 1 on a single server, 3 in a cluster (orchestrator replicas are processes: start more of them)")
	fs.IntVar(&o.replyPartitions, "reply-partitions", bus.DefaultReplyPartitions, "partitions the replies stream stores replies in when it is first set up, each consumed by the orchestrator replica that owns it (a reply reaches the replica that holds its conversation); 0: none, every replica consumes every reply. A stream keeps the count it was set up with; more replicas want more (each partition is a durable)")
	// The flag's name until it said which replicas it means; deployments
	// that pass it keep working, told to rename it.
	oldReplicas := fs.Int("replicas", 0, "deprecated: --stream-replicas")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 30*time.Second, "how long a run's lease lasts unrenewed; a run whose orchestrator died is relaunched after it")
	fs.DurationVar(&o.reconcileInterval, "reconcile-interval", 15*time.Second, "how often stored conversations are scanned for work a dead or stopped replica left undone")
	wireForm := fs.String("wire", "msgpack", "body encoding of the calls, approval requests and events it publishes: msgpack, or json for workers and approvers that read only JSON (every reader accepts both)")
	fs.DurationVar(&o.retention, "retention", 30*24*time.Hour, "finished (completed, failed, cancelled) conversations are deleted this long after their last change; audit records stay. 0 keeps them. The default of the agent files that have no retention: (a file's retention: wins)")
	fs.DurationVar(&o.replyAckWait, "reply-ack-wait", 30*time.Second, "ack wait of the replies consumer: a reply a dead replica was handling is delivered again after it")
	fs.DurationVar(&o.claimWindow, "claim-window", 50*time.Millisecond, "how long a run may go on before what it starts from is stored (a follow-up's claim of its batch, a new conversation's start): one that pauses or ends within it is stored with that, one write fewer; a start is answered once stored; 0 stores every claim and start before its run begins")
	pos, err := fs.Parse(args, stdout)
	if err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["replicas"] {
		if set["stream-replicas"] && *oldReplicas != o.streamReplicas {
			return o, fmt.Errorf("--replicas %d and --stream-replicas %d: give --stream-replicas only (--replicas is its deprecated name)", *oldReplicas, o.streamReplicas)
		}
		o.streamReplicas = *oldReplicas
		o.warnings = append(o.warnings, "--replicas is deprecated and will be removed: use --stream-replicas (the replicas of the streams, not of the orchestrator)")
	}
	switch *wireForm {
	case "msgpack":
		o.contentType = wire.ContentTypeMsgpack
	case "json":
		o.contentType = wire.ContentTypeJSON
	default:
		return o, fmt.Errorf("--wire %q: want msgpack or json", *wireForm)
	}
	switch {
	case len(pos) != 0:
		return o, cli.Usagef(command.Name, "unexpected argument %q", pos[0])
	case o.sync != "always" && o.sync != "default":
		return o, fmt.Errorf("--sync %q: want always or default", o.sync)
	case o.storeMinFreeMiB < 1:
		return o, fmt.Errorf("--store-min-free %d: want at least 1 (MiB)", o.storeMinFreeMiB)
	case o.claimWindow < 0:
		return o, fmt.Errorf("--claim-window %s: must not be negative (0 stores every claim first)", o.claimWindow)
	case o.retention < 0:
		return o, fmt.Errorf("--retention %s: must not be negative (0 keeps finished conversations)", o.retention)
	case o.stateCacheMiB < 0:
		return o, fmt.Errorf("--state-cache %d: must not be negative (0 takes the default)", o.stateCacheMiB)
	case o.streamReplicas < 1 || o.streamReplicas > 5:
		return o, fmt.Errorf("--stream-replicas %d: want 1 to 5", o.streamReplicas)
	case o.replyPartitions < 0 || o.replyPartitions > 1024:
		return o, fmt.Errorf("--reply-partitions %d: want 0 to 1024", o.replyPartitions)
	case o.natsURL != "" && o.natsUsers != "":
		return o, errors.New("--nats-users configures the embedded server: with --nats, give the server those users (see --write-nats-config) and connect with --user/--password or --creds")
	case o.writeNATSConfig != "" && o.natsUsers == "":
		return o, errors.New("--write-nats-config needs --nats-users")
	}
	if o.natsURL != "" {
		if _, err := bus.CheckURL(o.natsURL); err != nil {
			return o, fmt.Errorf("--nats: %w", err)
		}
	}
	return o, nil
}

// setup is what run prepares before it touches the store or the network.
type setup struct {
	o       options
	logger  *slog.Logger
	auth    natsAuth
	token   string
	users   []api.User
	trusted map[string]ed25519.PublicKey
	agents  []*orchestrator.AgentConfig
}

func prepare(o options, stderr io.Writer, lookupEnv func(string) (string, bool)) (*setup, error) {
	logger, err := cli.Logger(stderr, o.logLevel, "log-level")
	if err != nil {
		return nil, err
	}
	s := &setup{o: o, logger: logger}
	for _, w := range o.warnings {
		logger.Warn(w)
	}
	if s.auth, err = natsAuthOf(o, lookupEnv); err != nil {
		return nil, err
	}
	if o.writeNATSConfig != "" {
		return s, nil
	}
	if s.token, err = cli.ReadToken("http-token-file", o.tokenFile); err != nil {
		return nil, err
	}
	if o.httpUsers != "" {
		if s.users, err = api.LoadUsers(o.httpUsers); err != nil {
			return nil, fmt.Errorf("--http-users: %w", err)
		}
	}
	if err := web.CheckListen(o.httpAddr, s.token != "" || len(s.users) > 0); err != nil {
		return nil, fmt.Errorf("--http: %w", err)
	}
	if s.trusted, err = parseTrust(o.trust); err != nil {
		return nil, err
	}
	if s.agents, err = loadAgents(o.agentFiles, lookupEnv, logger); err != nil {
		return nil, err
	}
	if err := checkSigned(o, s.agents, s.trusted); err != nil {
		return nil, err
	}
	return s, nil
}

// checkSigned refuses to start a replica reachable beyond loopback (its
// HTTP API, its embedded NATS server, or a NATS server elsewhere) with an
// agent that takes unsigned decisions, unless --allow-unsigned says so:
// whoever reaches the bus or the API could otherwise decide any call.
func checkSigned(o options, agents []*orchestrator.AgentConfig, trusted map[string]ed25519.PublicKey) error {
	if o.allowUnsigned {
		return nil
	}
	exposed := ""
	switch {
	case web.CheckListen(o.httpAddr, false) != nil:
		exposed = "--http " + o.httpAddr
	case o.natsURL == "" && web.CheckListen(o.natsListen, false) != nil:
		exposed = "--nats-listen " + o.natsListen
	case o.natsURL != "" && !loopbackURLs(o.natsURL):
		exposed = "--nats " + o.natsURL
	}
	if exposed == "" {
		return nil
	}
	for _, a := range agents {
		trust := len(trusted)
		if a.Trust != nil {
			trust = len(a.Trust)
		}
		if trust == 0 {
			name := a.Name
			if name == "" {
				name = orchestrator.DefaultAgentName
			}
			return fmt.Errorf("%s listens beyond loopback and agent %s takes unsigned decisions: give trust keys (--trust-approver NAME=PUBKEY, or trust: in the agent file), or --allow-unsigned", exposed, name)
		}
	}
	return nil
}

// loopbackURLs reports whether every server of a --nats list is on this
// machine.
func loopbackURLs(list string) bool {
	for _, raw := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil {
			return false
		}
		host := u.Hostname()
		if host == "localhost" {
			continue
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	s, err := prepare(o, stderr, lookupEnv)
	if err != nil {
		return err
	}
	if o.writeNATSConfig != "" {
		if err := os.WriteFile(o.writeNATSConfig, []byte(bus.ServerConfigBlock(s.auth.users)), 0o600); err != nil {
			return fmt.Errorf("--write-nats-config: %w", err)
		}
		s.logger.Info("nats-server authorization written", slog.String("file", o.writeNATSConfig), slog.Int("users", len(s.auth.users)))
		return nil
	}
	flushTraces, err := telemetry.StartTracing(ctx, "orchestrator", os.Getenv, s.logger)
	if err != nil {
		return err
	}
	defer flushTraces()
	// The HTTP port is taken before the store is opened: a busy port fails
	// at once, with nothing created.
	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("--http: %w", err)
	}
	defer ln.Close()
	bs, err := s.startBus(ctx)
	defer bs.close()
	if err != nil {
		return err
	}
	// Served at /metrics on the --http address, behind its token.
	reg := telemetry.NewRegistry()
	var writeErr func() error
	if bs.srv != nil {
		writeErr = bs.srv.WriteError
	}
	orch, err := orchestrator.New(orchestrator.Config{
		ServerWriteError: writeErr,
		Bus:              bs.b, EventBus: bs.events, Agents: s.agents, AgentWait: o.agentWait, LookupEnv: lookupEnv, TrustedApprovers: s.trusted,
		MaxConcurrentRuns: o.maxRuns, Logger: s.logger, Metrics: telemetry.NewOrchestratorMetrics(reg),
		LeaseTTL: o.leaseTTL, ReconcileInterval: o.reconcileInterval, ReplyAckWait: o.replyAckWait, Retention: o.retention,
		ClaimWindow: claimWindowOf(o.claimWindow), StateCacheBytes: int64(o.stateCacheMiB) << 20,
	})
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := orch.Start(sctx); err != nil {
		return err
	}
	s.logger.Info("orchestrator serving", slog.String("http", "http://"+ln.Addr().String()), slog.String("chat", "http://"+ln.Addr().String()+page.Path), slog.Bool("auth", s.token != "" || len(s.users) > 0))
	// Shutdown order: stop HTTP (Serve returns once ctx ends and requests
	// are done), stop consuming, wait for runs (bounded), then the deferred
	// calls close the bus and the embedded server.
	// The chat page's files need no token (a browser cannot send one on
	// a navigation); the API calls it makes do.
	err = web.Serve(ctx, ln, site.Handler(orch, site.Config{API: api.Config{Token: s.token, Users: s.users, Logger: s.logger, Metrics: telemetry.Handler(reg)},
		Chat: chat.Config{Logger: s.logger}}),
		web.ServeConfig{Logger: s.logger})
	s.logger.Info("shutting down")
	stopOrch(orch, o.shutdownTimeout, s.logger)
	return err
}

// buses are the orchestrator's connections and, without --nats, its
// embedded server. Events go on a second connection, so that a busy run's
// events are not queued ahead of its state writes and calls.
type buses struct {
	srv       *embedded.Server
	b, events *bus.Bus
}

func (s *setup) startBus(ctx context.Context) (*buses, error) {
	o, bs := s.o, &buses{}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	connect := func(name string) (*bus.Bus, error) {
		cfg := bus.ConnConfig{URL: o.natsURL, Name: name, User: s.auth.user, Password: s.auth.password, CredsFile: o.creds, Logger: s.logger, ContentType: o.contentType}
		if bs.srv != nil {
			cfg.CredsFile = ""
			return bs.srv.Connect(cctx, cfg)
		}
		return bus.Connect(cctx, cfg)
	}
	var err error
	if o.natsURL == "" {
		bs.srv, err = embedded.StartServer(embedded.ServerConfig{StoreDir: o.store, Listen: o.natsListen, SyncAlways: o.sync == "always", Users: s.auth.users, Logger: s.logger,
			MinFreeBytes: uint64(o.storeMinFreeMiB) << 20})
		if err != nil {
			return bs, fmt.Errorf("--nats-listen %s: %w", o.natsListen, err)
		}
		s.logger.Info("embedded NATS server", slog.String("url", bs.srv.ClientURL()), slog.String("store", o.store), slog.String("sync", o.sync))
	}
	if bs.b, err = connect("orchestrator"); err != nil {
		return bs, err
	}
	if bs.events, err = connect("orchestrator-events"); err != nil {
		return bs, err
	}
	partitions := o.replyPartitions
	if partitions == 0 {
		partitions = -1 // none
	}
	return bs, bs.b.Setup(cctx, bus.SetupConfig{Replicas: o.streamReplicas, ReplyPartitions: partitions})
}

func (bs *buses) close() {
	if bs == nil {
		return
	}
	for _, b := range []*bus.Bus{bs.events, bs.b} {
		if b != nil {
			b.Close()
		}
	}
	if bs.srv != nil {
		bs.srv.Shutdown()
	}
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
	users, err := usersfile.Load(o.natsUsers)
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

func parseTrust(list cli.Pairs) (map[string]ed25519.PublicKey, error) {
	out := map[string]ed25519.PublicKey{}
	for _, v := range list {
		name, key, ok := strings.Cut(v, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("--trust-approver %q: want NAME=PUBKEY", v)
		}
		if err := wire.ValidateToken("approver name", name); err != nil {
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

// loadAgents reads the --agent files and directories, or builds the demo:
// on the script model, or on OpenAI when OPENAI_API_KEY is set.
func loadAgents(paths []string, lookupEnv func(string) (string, bool), logger *slog.Logger) ([]*orchestrator.AgentConfig, error) {
	if len(paths) > 0 {
		cfgs, files, err := agentconfig.LoadAll(paths)
		if err != nil {
			return nil, err
		}
		for i, cfg := range cfgs {
			logger.Info("agent", slog.String("name", cfg.Name), slog.String("file", files[i]), slog.String("digest", orchestrator.ShortDigest(orchestrator.AgentDigest(cfg))),
				slog.String("provider", cfg.Model.Provider), slog.String("model", cfg.Model.Name), slog.Int("tools", len(cfg.Tools)))
			if key, _ := lookupEnv("OPENAI_API_KEY"); key != "" && cfg.Model.APIKeyEnv != "OPENAI_API_KEY" {
				logger.Warn("OPENAI_API_KEY is set but not used: only the built-in demo (no --agent) reads it; an agent file names its key with model.api_key_env", slog.String("file", files[i]))
			}
		}
		return cfgs, nil
	}
	cfg, err := agentconfig.Demo()
	if err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = "demo"
	}
	if key, ok := lookupEnv("OPENAI_API_KEY"); ok && key != "" {
		model, _ := lookupEnv("OPENAI_MODEL")
		if model == "" {
			model = "gpt-4o-mini"
		}
		base, _ := lookupEnv("OPENAI_BASE_URL")
		cfg.Model = orchestrator.ModelConfig{Provider: agentconfig.ProviderOpenAI, Name: model, BaseURL: base, APIKey: key}
		cfg.Script = nil
		logger.Info("agent: the built-in demo", slog.String("provider", agentconfig.ProviderOpenAI), slog.String("model", model))
	} else {
		logger.Info("agent: the built-in demo", slog.String("provider", agentconfig.ProviderScript), slog.String("hint", "set OPENAI_API_KEY for a real model"))
	}
	return []*orchestrator.AgentConfig{cfg}, nil
}

// claimWindowOf is the Config.ClaimWindow of --claim-window, whose 0 is
// the Config's "none" (below zero), not its default.
func claimWindowOf(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
