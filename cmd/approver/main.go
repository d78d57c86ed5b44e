// Command approver is toolgate's approval bot: it decides approval requests
// by a CEL policy, optionally asks a human at the terminal about the ones
// the policy escalates, and publishes (signed) decisions.
//
//	approver --policy examples/policy.yaml [--key approver.key] [--interactive]
//	approver keygen --out approver.key   # prints the public key to trust
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
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
	if len(args) > 0 && args[0] == "keygen" {
		return keygen(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("approver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	natsURL := fs.String("nats", envOr("TOOLGATE_NATS_URL", "nats://127.0.0.1:4222"), "NATS server URL(s), comma-separated (env TOOLGATE_NATS_URL)")
	policyFile := fs.String("policy", "", "policy file (YAML); without it every request is escalated")
	interactive := fs.Bool("interactive", false, "ask at the terminal about requests the policy escalates")
	id := fs.String("id", defaultID(), "approver id: its durable consumer and the approver_id of its decisions")
	keyFile := fs.String("key", "", "private key file to sign decisions with (see keygen); without it decisions are unsigned")
	tool := fs.String("tool", "", "only see requests for this tool (default: all tools)")
	user := fs.String("user", "", "NATS user")
	password := fs.String("password", os.Getenv("TOOLGATE_NATS_PASSWORD"), "NATS password (env TOOLGATE_NATS_PASSWORD)")
	creds := fs.String("creds", "", "NATS credentials file; overrides --user/--password")
	connectTimeout := fs.Duration("connect-timeout", 30*time.Second, "how long to wait for the NATS server")
	logLevel := fs.String("log-level", "", "debug, info, warn or error (default info; warn with --interactive)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: approver [flags]\n       approver keygen --out FILE")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := bus.ValidateToken("--id", *id); err != nil {
		return err
	}
	if *policyFile == "" && !*interactive {
		return errors.New("nothing to decide with: give --policy, --interactive or both")
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

	cfg := approver.Config{ID: *id, Logger: logger}
	if *policyFile != "" {
		p, err := approver.LoadPolicy(*policyFile)
		if err != nil {
			return err
		}
		cfg.Policy = p
		logger.Info("policy loaded", slog.String("file", *policyFile), slog.Int("rules", p.Len()))
	}
	if *keyFile != "" {
		key, err := approver.LoadKey(*keyFile)
		if err != nil {
			return err
		}
		cfg.Key = key
		logger.Info("signing decisions", slog.String("public_key", approver.EncodePublicKey(key.Public().(ed25519.PublicKey))))
	} else {
		logger.Warn("no --key: decisions are unsigned; orchestrators that trust keys will refuse them")
	}
	if *tool != "" {
		f, err := bus.ApprovalSubject(*tool)
		if err != nil {
			return fmt.Errorf("--tool: %w", err)
		}
		cfg.Filter = f
	}
	if *interactive {
		p := approver.NewPrompt(stdin, stdout)
		defer p.Close()
		cfg.Asker = p
	}

	cctx, cancel := context.WithTimeout(ctx, *connectTimeout)
	b, err := bus.Connect(cctx, bus.ConnConfig{
		URL: *natsURL, Name: *id,
		User: *user, Password: *password, CredsFile: *creds,
		Logger: logger,
	})
	cancel()
	if err != nil {
		return err
	}
	// Closed after Run has stopped consuming: the last decision is
	// published before the connection goes.
	defer b.Close()
	cfg.Bus = b

	a, err := approver.New(cfg)
	if err != nil {
		return err
	}
	return a.Run(ctx)
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
