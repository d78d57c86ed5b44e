// Command toolgate is a small client of the orchestrator's HTTP API:
//
//	toolgate run [-conversation ID] [-follow] PROMPT
//	toolgate watch CONVERSATION_ID
//	toolgate pending
//	toolgate health    # wait until the orchestrator answers
//	toolgate demo      # the seed's approval conversation, printed as it unfolds
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/client"
)

const demoPrompt = "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "toolgate:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("toolgate", flag.ContinueOnError)
	addr := fs.String("addr", envOr("TOOLGATE_ADDR", "http://127.0.0.1:8080"), "orchestrator base URL")
	tokenFile := fs.String("token-file", "", "file holding the API bearer token")
	conversation := fs.String("conversation", "", "continue this conversation (run)")
	follow := fs.Bool("follow", false, "print events until the conversation ends (run)")
	wait := fs.Duration("wait", 2*time.Minute, "how long to wait for the orchestrator and the conversation")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: toolgate [flags] run PROMPT | watch ID | pending | health | demo")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := &client.Client{BaseURL: *addr}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("read token: %w", err)
		}
		c.Token = strings.TrimSpace(string(b))
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("missing command")
	}
	switch rest[0] {
	case "run":
		if len(rest) < 2 {
			return errors.New("run: missing PROMPT")
		}
		rs, err := c.StartRun(ctx, strings.Join(rest[1:], " "), *conversation)
		if err != nil {
			return err
		}
		if !*follow {
			return json.NewEncoder(os.Stdout).Encode(rs)
		}
		return watch(ctx, c, rs.ConversationID, *wait)
	case "watch":
		if len(rest) != 2 {
			return errors.New("watch: want one CONVERSATION_ID")
		}
		return watch(ctx, c, rest[1], *wait)
	case "pending":
		p, err := c.Pending(ctx)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(p)
	case "health":
		hctx, cancel := context.WithTimeout(ctx, *wait)
		defer cancel()
		return c.WaitHealthy(hctx)
	case "demo":
		return demo(ctx, c, *wait)
	}
	fs.Usage()
	return fmt.Errorf("unknown command %q", rest[0])
}

func watch(ctx context.Context, c *client.Client, id string, wait time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	conv, err := c.Follow(wctx, id, os.Stdout)
	if err != nil {
		return err
	}
	return printConversation(conv)
}

func demo(ctx context.Context, c *client.Client, wait time.Duration) error {
	hctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := c.WaitHealthy(hctx); err != nil {
		return err
	}
	fmt.Printf("▶ prompt: %s\n", demoPrompt)
	rs, err := c.StartRun(ctx, demoPrompt, "")
	if err != nil {
		return err
	}
	fmt.Printf("▶ conversation %s, run %s\n", rs.ConversationID, rs.RunID)
	return watch(ctx, c, rs.ConversationID, wait)
}

func printConversation(conv *client.Conversation) error {
	fmt.Printf("\n── conversation %s: %s (%d runs) ──\n", conv.ConversationID, conv.Status, len(conv.Runs))
	if err := client.WriteTranscript(os.Stdout, conv.Messages); err != nil {
		return err
	}
	if conv.Error != "" {
		return fmt.Errorf("conversation failed: %s", conv.Error)
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
