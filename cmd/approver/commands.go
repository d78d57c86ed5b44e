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
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/wire"
)

// common are the flags every mode shares.
type common struct {
	nats                   *cli.NATS
	id, keyFile, tool      string
	orchURL, orchTokenFile string
}

func commonFlags(fs *cli.FlagSet) *common {
	c := &common{nats: cli.RegisterNATS(fs.FlagSet)}
	fs.StringVar(&c.id, "id", cli.DefaultID("approver", ""), "approver id: its durable consumer and the approver_id of its decisions (default with --user: the user's name)")
	fs.StringVar(&c.keyFile, "key", "", "private key file to sign decisions with (see keygen); without it decisions are unsigned")
	fs.StringVar(&c.tool, "tool", "", "only see requests for this tool (default: all tools)")
	fs.StringVar(&c.orchURL, "orchestrator", os.Getenv("TOOLGATE_ORCHESTRATOR_URL"), "orchestrator API URL, for transcripts, and what is pending when no orchestrator answers on NATS")
	fs.StringVar(&c.orchTokenFile, "orchestrator-token-file", "", "file holding the orchestrator API's bearer token")
	return c
}

// idFromUser makes the NATS user the id when --id was not given: the
// users file lets an approver user own the durables of its own name
// (bus.ApproverDeny), so a bot of another id would have a durable any
// approver user may edit.
func (c *common) idFromUser(fs *cli.FlagSet) {
	if c.nats.User == "" {
		return
	}
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "id" })
	if !given {
		c.id = c.nats.User
	}
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
	f, err := wire.ApprovalSubject(c.tool)
	if err != nil {
		return "", fmt.Errorf("--tool: %w", err)
	}
	return f, nil
}

func (c *common) orchestrator() (*client.Client, error) {
	if c.orchURL == "" {
		return nil, nil
	}
	tok, err := cli.ReadToken("orchestrator-token-file", c.orchTokenFile)
	if err != nil {
		return nil, err
	}
	return &client.Client{BaseURL: c.orchURL, Token: tok, HTTP: &http.Client{Timeout: 10 * time.Second}}, nil
}

// oneShot runs list, approve or deny.
func oneShot(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	line := map[string]string{"list": synopsis[1], "approve": synopsis[2], "deny": synopsis[3]}[cmd]
	fs := cli.NewFlagSet(cli.Command{Name: "approver " + cmd, Usage: []string{line}, Env: env})
	cf := commonFlags(fs)
	argsJSON := fs.String("args", "", "approve: JSON object replacing the model's args (checked against the tool's schema)")
	message := fs.String("message", "", "deny: what the model is told")
	metadata := fs.String("metadata", "", "approve: JSON object given to the approved call's tool (its call's metadata)")
	pos, err := fs.Parse(args, stdout)
	if err != nil {
		return err
	}
	cf.idFromUser(fs)
	want := 1
	if cmd == "list" {
		want = 0
	}
	switch {
	case len(pos) != want:
		return cli.Usagef("approver "+cmd, "want %d argument(s), got %d", want, len(pos))
	case cmd == "deny" && strings.TrimSpace(*message) == "":
		return errors.New("deny: --message is required: it is what the model is told")
	case cmd != "approve" && *argsJSON != "":
		return fmt.Errorf("%s: --args is for approve", cmd)
	case cmd != "approve" && *metadata != "":
		return fmt.Errorf("%s: --metadata is for approve", cmd)
	}
	c, err := cf.client(ctx, stdout, stderr)
	if err != nil {
		return err
	}
	defer c.Bus.Close()
	switch cmd {
	case "list":
		return c.List(ctx)
	case "approve":
		return c.Approve(ctx, pos[0], json.RawMessage(*argsJSON), json.RawMessage(*metadata))
	default:
		return c.Deny(ctx, pos[0], *message)
	}
}

// client connects and returns the one-shot commands' client; its Bus is to
// be closed.
func (c *common) client(ctx context.Context, stdout, stderr io.Writer) (*approver.CLI, error) {
	if err := c.nats.Check(); err != nil {
		return nil, err
	}
	key, err := c.loadKey()
	if err != nil {
		return nil, err
	}
	filter, err := c.filter()
	if err != nil {
		return nil, err
	}
	orch, err := c.orchestrator()
	if err != nil {
		return nil, err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	b, err := c.nats.Connect(ctx, c.id, bus.RoleApprover, logger)
	if err != nil {
		return nil, err
	}
	return &approver.CLI{
		Bus: b, ID: c.id, Key: key, Filter: filter, Orchestrator: orch,
		Out: stdout, Progress: stderr, Terminal: isTerminal(stderr),
	}, nil
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
	fs := cli.NewFlagSet(cli.Command{
		Name: "approver keygen", Usage: []string{"approver keygen --out FILE"},
		About: "Writes a new ed25519 private key to FILE and prints its public key (base64)\nfor the orchestrator's --trust-approver NAME=PUBKEY, where NAME is the --id of\nthe approver that signs with the key (its decisions' approver_id).",
	})
	out := fs.String("out", "", "write the private key to this file (mode 0600; never overwritten)")
	pos, err := fs.Parse(args, stdout)
	if err != nil {
		return err
	}
	if *out == "" || len(pos) != 0 {
		return cli.Usagef("approver keygen", "want --out FILE and no arguments")
	}
	pub, err := approver.GenerateKey(*out)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, approver.EncodePublicKey(pub))
	if err != nil {
		return err
	}
	// On stderr, so that stdout stays the key alone for scripts.
	_, err = fmt.Fprintf(stderr, "trust it with: orchestrator --trust-approver ID=%s\n  where ID is the --id of the approver that signs with %s\n", approver.EncodePublicKey(pub), *out)
	return err
}
