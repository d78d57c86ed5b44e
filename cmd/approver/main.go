// Command approver is toolgate's approval bot: it decides approval requests
// by a CEL policy, optionally asks a human at the terminal about the ones
// the policy escalates, and publishes (signed) decisions.
//
//	approver --policy examples/policy.yaml [--key approver.key] [--interactive]
//	approver --http 127.0.0.1:8090 [--policy ...]   # the approval inbox, a web page
//	approver list | approve ID [--args JSON] | deny ID --message TEXT
//	approver keygen --out approver.key   # prints the public key to trust
package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
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
	"unicode"

	"github.com/toolgate/toolgate/internal/web"

	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/approver/inbox"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "approver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "keygen":
			return keygen(args[1:], stdout, stderr)
		case "list", "approve", "deny":
			return oneShot(ctx, args[0], args[1:], stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("approver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := commonFlags(fs)
	policyFile := fs.String("policy", "", "policy file (YAML); without it every request is escalated")
	interactive := fs.Bool("interactive", false, "ask at the terminal about requests the policy escalates")
	httpAddr := fs.String("http", "", "serve the approval inbox (a web page) on this address, e.g. 127.0.0.1:8090")
	tokenFile := fs.String("http-token-file", "", "file holding the inbox's access token; required to listen beyond loopback")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics at /metrics on this address")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (default info; warn with --interactive)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	id := &cf.id
	if err := bus.ValidateToken("--id", *id); err != nil {
		return err
	}
	if *policyFile == "" && !*interactive && *httpAddr == "" {
		return errors.New("nothing to decide with: give --policy, --interactive, --http or a combination")
	}
	var token string
	if *httpAddr != "" {
		var err error
		if token, err = readToken(*tokenFile); err != nil {
			return err
		}
		if err := web.CheckListen(*httpAddr, token != ""); err != nil {
			return err
		}
	}

	level := *logLevel
	if level == "" {
		level = "info"
		if *interactive {
			level = "warn"
		}
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl}))

	flushTraces, err := telemetry.StartTracing(ctx, "approver", os.Getenv, logger)
	if err != nil {
		return err
	}
	defer flushTraces()
	reg := telemetry.NewRegistry()
	metrics := telemetry.NewApproverMetrics(reg)
	cfg := approver.Config{ID: *id, Logger: logger, Metrics: metrics}
	if *policyFile != "" {
		p, err := approver.LoadPolicy(*policyFile)
		if err != nil {
			return err
		}
		cfg.Policy = p
		logger.Info("policy loaded", slog.String("file", *policyFile), slog.Int("rules", p.Len()))
	}
	key, err := cf.loadKey()
	if err != nil {
		return err
	}
	cfg.Key = key
	if key != nil {
		logger.Info("signing decisions", slog.String("public_key", approver.EncodePublicKey(key.Public().(ed25519.PublicKey))))
	} else {
		logger.Warn("no --key: decisions are unsigned; orchestrators that trust keys will refuse them")
	}
	if cfg.Filter, err = cf.filter(); err != nil {
		return err
	}
	orch, err := cf.orchestrator()
	if err != nil {
		return err
	}
	if *interactive {
		p := approver.NewPrompt(stdin, stdout)
		defer p.Close()
		cfg.Asker = p
	}

	// Listen before connecting, so that a bad address fails at once.
	var httpLn, metricsLn net.Listener
	if *httpAddr != "" {
		if httpLn, err = net.Listen("tcp", *httpAddr); err != nil {
			return fmt.Errorf("--http: %w", err)
		}
		defer httpLn.Close()
	}
	if *metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", *metricsAddr); err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		defer metricsLn.Close()
	}

	b, err := cf.connect(ctx, logger)
	if err != nil {
		return err
	}
	// Closed after everything has stopped consuming: the last decision is
	// published before the connection goes.
	defer b.Close()
	cfg.Bus = b

	g, gctx := errgroup.WithContext(ctx)
	if *policyFile != "" || *interactive {
		a, err := approver.New(cfg)
		if err != nil {
			return err
		}
		g.Go(func() error { return a.Run(gctx) })
	}
	if httpLn != nil {
		ib, err := inbox.New(inbox.Config{
			Bus: b, ID: *id, Key: key, Filter: cfg.Filter, Token: token,
			Orchestrator: orch, Metrics: metrics, Logger: logger,
		})
		if err != nil {
			return err
		}
		g.Go(func() error { return ib.Run(gctx) })
		g.Go(func() error { return web.Serve(gctx, httpLn, ib.Handler(), web.ServeConfig{Logger: logger}) })
		logger.Info("approval inbox", slog.String("url", "http://"+httpLn.Addr().String()+"/"), slog.Bool("token", token != ""))
	}
	if metricsLn != nil {
		g.Go(func() error { return telemetry.ServeListener(gctx, metricsLn, reg) })
	}
	return g.Wait()
}

const usage = `usage: approver [flags]                      the bot (--policy, --interactive) and/or the inbox (--http)
       approver list [flags]                 pending approval requests
       approver approve ID [--args JSON]     approve (with edited args); ID is TOOL_CALL_ID or RUN_ID/TOOL_CALL_ID
       approver deny ID --message TEXT       deny, telling the model why
       approver keygen --out FILE`

// common are the flags every mode shares.
type common struct {
	natsURL, id, keyFile, tool, user, password, passwordFile, creds string
	orchURL, orchTokenFile                                          string
	connectTimeout                                                  time.Duration
}

func commonFlags(fs *flag.FlagSet) *common {
	c := &common{}
	fs.StringVar(&c.natsURL, "nats", envOr("TOOLGATE_NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL(s), comma-separated (env TOOLGATE_NATS_URL)")
	fs.StringVar(&c.id, "id", defaultID(), "approver id: its durable consumer and the approver_id of its decisions")
	fs.StringVar(&c.keyFile, "key", "", "private key file to sign decisions with (see keygen); without it decisions are unsigned")
	fs.StringVar(&c.tool, "tool", "", "only see requests for this tool (default: all tools)")
	fs.StringVar(&c.user, "user", "", "NATS user")
	fs.StringVar(&c.password, "password", bus.TakeEnvPassword(), "NATS password (env TOOLGATE_NATS_PASSWORD); --password-file keeps it out of the command line")
	fs.StringVar(&c.passwordFile, "password-file", "", "file holding the NATS password; overrides --password")
	fs.StringVar(&c.creds, "creds", "", "NATS credentials file; overrides --user/--password")
	fs.DurationVar(&c.connectTimeout, "connect-timeout", 30*time.Second, "how long to wait for the NATS server")
	fs.StringVar(&c.orchURL, "orchestrator", os.Getenv("TOOLGATE_ORCHESTRATOR_URL"), "orchestrator API URL, the authority on what is pending (env TOOLGATE_ORCHESTRATOR_URL)")
	fs.StringVar(&c.orchTokenFile, "orchestrator-token-file", "", "file holding the orchestrator API's bearer token")
	return c
}

func (c *common) loadKey() (ed25519.PrivateKey, error) {
	if c.keyFile == "" {
		return nil, nil
	}
	return approver.LoadKey(c.keyFile)
}

func (c *common) filter() (string, error) {
	if c.tool == "" {
		return "", nil
	}
	f, err := bus.ApprovalSubject(c.tool)
	if err != nil {
		return "", fmt.Errorf("--tool: %w", err)
	}
	return f, nil
}

func (c *common) orchestrator() (*client.Client, error) {
	if c.orchURL == "" {
		return nil, nil
	}
	tok, err := readToken(c.orchTokenFile)
	if err != nil {
		return nil, fmt.Errorf("--orchestrator-token-file: %w", err)
	}
	return &client.Client{BaseURL: c.orchURL, Token: tok, HTTP: &http.Client{Timeout: 10 * time.Second}}, nil
}

func (c *common) connect(ctx context.Context, logger *slog.Logger) (*bus.Bus, error) {
	cctx, cancel := context.WithTimeout(ctx, c.connectTimeout)
	defer cancel()
	return bus.Connect(cctx, bus.ConnConfig{
		URL: c.natsURL, Name: c.id,
		User: c.user, Password: c.password, PasswordFile: c.passwordFile, CredsFile: c.creds, Role: bus.RoleApprover,
		Logger: logger,
	})
}

// readToken reads a token file ("" when no file is given); a file without
// a token is an error, never an open inbox.
func readToken(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", file)
	}
	return tok, nil
}

// oneShot runs list, approve or deny.
func oneShot(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("approver "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cf := commonFlags(fs)
	argsJSON := fs.String("args", "", "approve: JSON object replacing the model's args (checked against the tool's schema)")
	message := fs.String("message", "", "deny: what the model is told")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usage)
		fs.PrintDefaults()
	}
	// Flags may follow the ID: approve call-1 --args '{...}'.
	var pos []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	want := 1
	if cmd == "list" {
		want = 0
	}
	if len(pos) != want {
		fs.Usage()
		return fmt.Errorf("%s: want %d argument(s), got %d", cmd, want, len(pos))
	}
	if cmd == "deny" && strings.TrimSpace(*message) == "" {
		return errors.New("deny: --message is required: it is what the model is told")
	}
	if cmd != "approve" && *argsJSON != "" {
		return fmt.Errorf("%s: --args is for approve", cmd)
	}
	key, err := cf.loadKey()
	if err != nil {
		return err
	}
	filter, err := cf.filter()
	if err != nil {
		return err
	}
	orch, err := cf.orchestrator()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := cf.connect(ctx, logger)
	if err != nil {
		return err
	}
	defer b.Close()
	cli := &approver.CLI{
		Bus: b, ID: cf.id, Key: key, Filter: filter, Orchestrator: orch,
		Out: stdout, Progress: stderr, Terminal: isTerminal(stderr),
	}
	switch cmd {
	case "list":
		return cli.List(ctx)
	case "approve":
		return cli.Approve(ctx, pos[0], json.RawMessage(*argsJSON))
	default:
		return cli.Deny(ctx, pos[0], *message)
	}
}

// isTerminal reports whether w is a character device (a terminal), where a
// spinner may redraw its line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func keygen(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("approver keygen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "write the private key to this file (mode 0600; never overwritten)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: approver keygen --out FILE\nprints the public key (base64) for the orchestrator's trusted keys")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() != 0 {
		fs.Usage()
		return errors.New("keygen: want --out FILE and no arguments")
	}
	pub, err := approver.GenerateKey(*out)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, approver.EncodePublicKey(pub))
	return err
}

// defaultID is approver-<hostname>, with what a subject token cannot hold
// (the dots of a domain name, say) turned into dashes.
func defaultID() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "local"
	}
	clean := strings.Map(func(r rune) rune {
		switch {
		case r == '.' || r == '*' || r == '>' || r == '/' || r == '\\',
			unicode.IsSpace(r), unicode.IsControl(r):
			return '-'
		}
		return r
	}, h)
	return "approver-" + clean
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
