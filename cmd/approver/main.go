// Command approver is toolgate's approval bot: it decides approval requests
// by a CEL policy, optionally asks a human at the terminal about the ones
// the policy escalates, and publishes (signed) decisions.
//
//	approver --policy examples/policy.yaml [--key approver.key] [--interactive]
//	approver --http 127.0.0.1:8090 [--policy ...]   # the approval inbox, a web page
//	approver list | approve ID [--args JSON] [--metadata JSON] | deny ID --message TEXT
//	approver keygen --out approver.key   # prints the public key to trust
//	approver notify --webhook URL [--inbox-url URL]   # posts each request, Slack-style
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/internal/web"
	"github.com/toolgate/toolgate/wire"
)

func main() {
	cli.Main("approver", func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return run(ctx, args, os.Stdin, stdout, stderr)
	})
}

var synopsis = []string{
	"approver [flags]                      the bot (--policy, --interactive) and/or the inbox (--http)",
	"approver list [flags]                 pending approval requests",
	"approver approve ID [--args JSON] [--metadata JSON]  approve (with edited args, metadata for the tool); ID is TOOL_CALL_ID or RUN_ID/TOOL_CALL_ID",
	"approver deny ID --message TEXT       deny, telling the model why",
	"approver keygen --out FILE            a signing key; prints the public key to trust",
	"approver notify --webhook URL [--inbox-url URL]  post each approval request to a webhook (Slack-style JSON)",
}

var env = append(slices.Clone(cli.NATSEnv),
	cli.Env{Name: "TOOLGATE_ORCHESTRATOR_URL", Doc: "default of --orchestrator"})

var command = cli.Command{Name: "approver", Usage: synopsis, Env: append(slices.Clone(env), cli.TraceEnv...)}

type options struct {
	*common
	policy, httpAddr, tokenFile, metrics, logLevel string
	interactive                                    bool
}

func parseFlags(args []string, stdout io.Writer) (*options, error) {
	o := &options{}
	fs := flagSet(o)
	pos, err := fs.Parse(args, stdout)
	if err != nil {
		return nil, err
	}
	o.idFromUser(fs)
	return o, o.check(pos)
}

// flagSet is the flag set of the bot and the inbox, filling o.
func flagSet(o *options) *cli.FlagSet {
	fs := cli.NewFlagSet(command)
	o.common = commonFlags(fs)
	fs.StringVar(&o.policy, "policy", "", "policy file (YAML); without it every request is escalated")
	fs.BoolVar(&o.interactive, "interactive", false, "ask at the terminal about requests the policy escalates")
	fs.StringVar(&o.httpAddr, "http", "", "serve the approval inbox (a web page) on this address, e.g. 127.0.0.1:8090")
	fs.StringVar(&o.tokenFile, "http-token-file", "", "file holding the inbox's access token; required to listen beyond loopback")
	fs.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics at /metrics on this address")
	fs.StringVar(&o.logLevel, "log-level", "", "debug, info, warn or error (default info; warn with --interactive)")
	return fs
}

func (o *options) check(pos []string) error {
	if len(pos) != 0 {
		return cli.Usagef(command.Name, "unexpected argument %q", pos[0])
	}
	if err := wire.ValidateToken("--id", o.id); err != nil {
		return err
	}
	if o.policy == "" && !o.interactive && o.httpAddr == "" {
		return errors.New("nothing to decide with: give --policy, --interactive, --http or a combination")
	}
	if o.logLevel == "" {
		o.logLevel = "info"
		if o.interactive {
			o.logLevel = "warn"
		}
	}
	return o.nats.Check()
}

// subcommands are the commands other than the bot and the inbox.
var subcommands = []string{"keygen", "list", "approve", "deny", "notify"}

// subcommand finds the subcommand in args, with flags allowed before it as
// after it (`approver --nats URL approve ID`), and returns it with the
// other arguments; "" when the first argument that is no flag or flag
// value is not a subcommand.
func subcommand(args []string) (string, []string) {
	// Every flag any mode takes, to tell a flag's value from a subcommand.
	fs := flagSet(&options{})
	fs.String("args", "", "")
	fs.String("message", "", "")
	fs.String("out", "", "")
	fs.String("metadata", "", "")
	fs.String("webhook", "", "")
	fs.String("inbox-url", "", "")
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			if slices.Contains(subcommands, a) {
				return a, append(slices.Clone(args[:i]), args[i+1:]...)
			}
			return "", args
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := fs.Lookup(name)
		if hasValue || f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		i++ // its value
	}
	return "", args
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	switch sub, rest := subcommand(args); sub {
	case "keygen":
		return keygen(rest, stdout, stderr)
	case "list", "approve", "deny":
		return oneShot(ctx, sub, rest, stdout, stderr)
	case "notify":
		return notify(ctx, rest, stdout, stderr)
	}
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	var token string
	if o.httpAddr != "" {
		if token, err = cli.ReadToken("http-token-file", o.tokenFile); err != nil {
			return err
		}
		if err := web.CheckListen(o.httpAddr, token != ""); err != nil {
			return err
		}
	}
	logger, err := cli.Logger(stderr, o.logLevel, "log-level")
	if err != nil {
		return err
	}
	flushTraces, err := telemetry.StartTracing(ctx, "approver", os.Getenv, logger)
	if err != nil {
		return err
	}
	defer flushTraces()
	reg := telemetry.NewRegistry()
	cfg, err := o.config(telemetry.NewApproverMetrics(reg), logger)
	if err != nil {
		return err
	}
	if o.interactive {
		p := approver.NewPrompt(stdin, stdout)
		defer p.Close()
		cfg.Asker = p
	}
	// Listen before connecting, so that a bad address fails at once.
	httpLn, err := listen("http", o.httpAddr)
	if err != nil {
		return err
	}
	defer closeListener(httpLn)
	metricsLn, err := listen("metrics", o.metrics)
	if err != nil {
		return err
	}
	defer closeListener(metricsLn)
	b, err := o.nats.Connect(ctx, o.id, bus.RoleApprover, logger)
	if err != nil {
		return err
	}
	// Closed after everything has stopped consuming: the last decision is
	// published before the connection goes.
	defer b.Close()
	cfg.Bus = b
	return serve(ctx, o, cfg, token, httpLn, metricsLn, reg)
}

// config is the approver's configuration from the flags, without the bus.
func (o *options) config(metrics *telemetry.ApproverMetrics, logger *slog.Logger) (approver.Config, error) {
	cfg := approver.Config{ID: o.id, Logger: logger, Metrics: metrics}
	if o.policy != "" {
		p, err := approver.LoadPolicy(o.policy)
		if err != nil {
			return cfg, err
		}
		cfg.Policy = p
		logger.Info("policy loaded", slog.String("file", o.policy), slog.Int("rules", p.Len()))
	}
	key, err := o.loadKey()
	if err != nil {
		return cfg, err
	}
	cfg.Key = key
	if key != nil {
		logger.Info("signing decisions", slog.String("public_key", approver.EncodePublicKey(key.Public().(ed25519.PublicKey))))
	} else {
		logger.Warn("no --key: decisions are unsigned; orchestrators that trust keys will refuse them")
	}
	if cfg.Filter, err = o.filter(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// serve runs the bot, the inbox and the metrics endpoint until ctx ends.
func serve(ctx context.Context, o *options, cfg approver.Config, token string, httpLn, metricsLn net.Listener, reg *prometheus.Registry) error {
	orch, err := o.orchestrator()
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	if o.policy != "" || o.interactive {
		a, err := approver.New(cfg)
		if err != nil {
			return err
		}
		g.Go(func() error { return a.Run(gctx) })
	}
	if httpLn != nil {
		ib, err := inbox.New(inbox.Config{
			Bus: cfg.Bus, ID: o.id, Key: cfg.Key, Filter: cfg.Filter, Token: token,
			Orchestrator: orch, Metrics: cfg.Metrics, Logger: cfg.Logger,
		})
		if err != nil {
			return err
		}
		g.Go(func() error { return ib.Run(gctx) })
		g.Go(func() error { return web.Serve(gctx, httpLn, ib.Handler(), web.ServeConfig{Logger: cfg.Logger}) })
		cfg.Logger.Info("approval inbox", slog.String("url", "http://"+httpLn.Addr().String()+"/"), slog.Bool("token", token != ""))
	}
	if metricsLn != nil {
		g.Go(func() error { return telemetry.ServeListener(gctx, metricsLn, reg) })
	}
	return g.Wait()
}

// listen listens on addr, or returns nil for no address.
func listen(flagName, addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flagName, err)
	}
	return ln, nil
}

func closeListener(ln net.Listener) {
	if ln != nil {
		_ = ln.Close()
	}
}
