// Command toolgate is a small client of the orchestrator's HTTP API:
//
//	toolgate run [--conversation ID | --new-id ID] [--agent NAME] [--caller JSON] [--follow] PROMPT
//	toolgate watch CONVERSATION_ID
//	toolgate pending [--json]
//	toolgate list [--status S] [--limit N] [--cursor C] [--all] [--json]
//	toolgate dlq [--conversation ID] [--tool-call-id ID] [--since T] [--limit N] [--cursor C] [--json]
//	toolgate audit [--conversation ID] [--tool-call-id ID] [--since T] [--limit N] [--cursor C] [--json]
//	toolgate grant [--deny] [--conversation ID] [--args JSON] [--caller ID] [--ttl D] TOOL | grants | revoke GRANT_ID
//	toolgate health [--pid PID]  # wait until the orchestrator answers
//	toolgate demo                # the seed's approval conversation, printed as it unfolds
//
// Flags may come before or after the command and its arguments.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/client"
)

const demoPrompt = "Delete `__init__.py`, write `Hello, world!` to `README.md`, and clear `.env`"

func main() { cli.Main("toolgate", run) }

var env = []cli.Env{
	{Name: "TOOLGATE_ADDR", Doc: "default of --addr"},
	{Name: "TOOLGATE_TOKEN_FILE", Doc: "default of --token-file"},
}

var command = cli.Command{
	Name: "toolgate",
	Usage: []string{
		"toolgate [flags] run [--conversation ID | --new-id ID] [--agent NAME] [--caller JSON] [--follow] PROMPT   start a run (and print its events)",
		"toolgate [flags] watch CONVERSATION_ID                       print a conversation's events until it ends",
		"toolgate [flags] pending [--json]                            the deferred calls waiting for a reply",
		"toolgate [flags] list [--status S] [--limit N] [--cursor C]  a page of conversations",
		"toolgate [flags] dlq [--conversation ID] [--tool-call-id ID] [--since T] [--limit N] [--cursor C]    dead letters, newest first",
		"toolgate [flags] audit [--conversation ID] [--tool-call-id ID] [--since T] [--limit N] [--cursor C]  audit records, newest first",
		"toolgate [flags] grant [--deny] [--conversation ID] [--args JSON] [--caller ID] [--ttl D] TOOL  a standing decision on TOOL's calls",
		"toolgate [flags] grants [--json]                             the standing decisions stored",
		"toolgate [flags] revoke GRANT_ID                             revoke a standing decision",
		"toolgate [flags] cancel CONVERSATION_ID                      cancel a conversation under way",
		"toolgate [flags] delete CONVERSATION_ID                      delete a finished conversation",
		"toolgate [flags] health [--pid PID]                          wait until the orchestrator answers",
		"toolgate [flags] demo                                        play the seed's approval conversation",
	},
	About: "Flags may also follow the command; `toolgate COMMAND --help` lists a command's flags.",
	Env:   env,
}

// global are the flags every command takes.
type global struct {
	addr, tokenFile string
	wait            time.Duration
}

func (g *global) register(fs *cli.FlagSet) {
	fs.StringVar(&g.addr, "addr", g.addr, "orchestrator base URL")
	fs.StringVar(&g.tokenFile, "token-file", g.tokenFile, "file holding the API bearer token")
	fs.DurationVar(&g.wait, "wait", g.wait, "how long to wait for the orchestrator and the conversation")
}

func (g *global) client() (*client.Client, error) {
	tok, err := cli.ReadToken("token-file", g.tokenFile)
	if err != nil {
		return nil, err
	}
	return &client.Client{BaseURL: g.addr, Token: tok}, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	g := &global{addr: cli.EnvOr("TOOLGATE_ADDR", "http://127.0.0.1:8080"), tokenFile: os.Getenv("TOOLGATE_TOKEN_FILE"), wait: 2 * time.Minute}
	top := cli.NewFlagSet(command)
	g.register(top)
	name, rest, err := top.ParseHead(args, stdout)
	if err != nil {
		return err
	}
	if name == "" {
		return cli.Usagef("toolgate", "missing command")
	}
	cmd, ok := commands[name]
	if !ok {
		return cli.Usagef("toolgate", "unknown command %q", name)
	}
	fs := cli.NewFlagSet(cli.Command{Name: "toolgate " + name, Usage: []string{"toolgate " + name + " " + cmd.synopsis}, About: cmd.about, Env: env})
	g.register(fs)
	opts := cmd.flags(fs)
	pos, err := fs.Parse(rest, stdout)
	if err != nil {
		return err
	}
	if cmd.args >= 0 && len(pos) != cmd.args || cmd.args < 0 && len(pos) == 0 {
		return cli.Usagef("toolgate "+name, "want %s", cmd.synopsis)
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	return cmd.run(ctx, c, g.wait, opts, pos, stdout, stderr)
}

// subcommand is one command of toolgate.
type subcommand struct {
	synopsis, about string
	// args is the number of positional arguments; -1: one or more.
	args  int
	flags func(*cli.FlagSet) any
	run   func(ctx context.Context, c *client.Client, wait time.Duration, opts any, args []string, stdout, stderr io.Writer) error
}

func noFlags(*cli.FlagSet) any { return nil }

// listOptions are list's flags.
type listOptions struct {
	client.ListOptions
	all, json bool
}

type runOpts struct {
	conversation, newID, agent, caller string
	follow                             bool
}

var commands = map[string]subcommand{
	"run": {
		synopsis: "[--conversation ID | --new-id ID] [--agent NAME] [--caller JSON] [--follow] PROMPT", args: -1,
		about: "Starts a run; PROMPT is the remaining arguments joined by spaces (put -- before a prompt that starts with -).",
		flags: func(fs *cli.FlagSet) any {
			o := &runOpts{}
			fs.StringVar(&o.conversation, "conversation", "", "continue this conversation")
			fs.StringVar(&o.newID, "new-id", "", `the id of the new conversation ("c" then letters and digits); default: one the orchestrator makes`)
			fs.StringVar(&o.agent, "agent", "", "the agent of a new conversation (needed when the orchestrators run several)")
			fs.StringVar(&o.caller, "caller", "", `who gives the prompt, a JSON object (e.g. {"user":"ann"}) that the agent's Go tools and approval rules see`)
			fs.BoolVar(&o.follow, "follow", false, "print events until the conversation ends")
			return o
		},
		run: func(ctx context.Context, c *client.Client, wait time.Duration, opts any, args []string, stdout, stderr io.Writer) error {
			o := opts.(*runOpts)
			if o.caller != "" && !json.Valid([]byte(o.caller)) {
				return fmt.Errorf("--caller: %q is not JSON (give an object, e.g. {\"user\":\"ann\"})", o.caller)
			}
			rs, err := c.Start(ctx, client.StartOptions{Prompt: strings.Join(args, " "), ConversationID: o.conversation, NewConversationID: o.newID, Agent: o.agent, Caller: json.RawMessage(o.caller)})
			if err != nil {
				return err
			}
			if !o.follow {
				return json.NewEncoder(stdout).Encode(rs)
			}
			return watch(ctx, c, rs.ConversationID, wait, stdout, stderr)
		},
	},
	"watch": {
		synopsis: "CONVERSATION_ID", args: 1, flags: noFlags,
		run: func(ctx context.Context, c *client.Client, wait time.Duration, _ any, args []string, stdout, stderr io.Writer) error {
			return watch(ctx, c, args[0], wait, stdout, stderr)
		},
	},
	"pending": {
		synopsis: "[--json]", args: 0,
		about: "Prints the deferred calls waiting for a reply, as a table (--json: as JSON).",
		flags: jsonFlag,
		run: func(ctx context.Context, c *client.Client, _ time.Duration, opts any, _ []string, stdout, _ io.Writer) error {
			p, err := c.Pending(ctx)
			if err != nil {
				return err
			}
			if *opts.(*bool) {
				return writeJSON(stdout, p)
			}
			return pendingTable(stdout, p, time.Now())
		},
	},
	"list": {
		synopsis: "[--status S] [--limit N] [--cursor C] [--all]", args: 0,
		about: "Prints a page of conversations as a table, in the order they were created (in id order with --status running, paused or resuming); pass the next cursor it prints as --cursor for the next page. With --all, prints every conversation, going through the pages itself. --json prints JSON instead (with --all, one object a line).",
		flags: func(fs *cli.FlagSet) any {
			o := &listOptions{}
			fs.StringVar(&o.Status, "status", "", "only conversations in this status (running, paused, resuming, completed, failed, cancelled)")
			fs.IntVar(&o.Limit, "limit", 0, "page size (default: the orchestrator's, 100)")
			fs.StringVar(&o.Cursor, "cursor", "", "the next_cursor of the previous page")
			fs.BoolVar(&o.all, "all", false, "every page, one conversation a line (with --status only)")
			fs.BoolVar(&o.json, "json", false, "print JSON (the API's answer; with --all, one object a line) instead of a table")
			return o
		},
		run: func(ctx context.Context, c *client.Client, _ time.Duration, opts any, _ []string, stdout, stderr io.Writer) error {
			o := opts.(*listOptions)
			if o.all {
				if o.Limit != 0 || o.Cursor != "" {
					return &cli.UsageError{Command: "list", Err: errors.New("--all goes through every page itself: give it no --limit or --cursor")}
				}
				enc := json.NewEncoder(stdout)
				var all []client.ConversationSummary
				for s, err := range c.Conversations(ctx, o.Status) {
					if err != nil {
						return err
					}
					if !o.json {
						all = append(all, s)
					} else if err := enc.Encode(s); err != nil {
						return err
					}
				}
				if o.json {
					return nil
				}
				return conversationTable(stdout, all, "")
			}
			page, err := c.List(ctx, o.ListOptions)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSON(stdout, page)
			}
			return conversationTable(stdout, page.Conversations, page.NextCursor)
		},
	},
	"dlq":    recordsCommand("dlq"),
	"audit":  recordsCommand("audit"),
	"grant":  grantCommand,
	"grants": grantsCommand,
	"revoke": revokeCommand,
	"cancel": {
		synopsis: "CONVERSATION_ID", args: 1, flags: noFlags,
		run: func(ctx context.Context, c *client.Client, _ time.Duration, _ any, args []string, stdout, stderr io.Writer) error {
			if err := c.Cancel(ctx, args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(stdout, "cancelled %s\n", args[0])
			return err
		},
	},
	"delete": {
		synopsis: "CONVERSATION_ID", args: 1, flags: noFlags,
		run: func(ctx context.Context, c *client.Client, _ time.Duration, _ any, args []string, stdout, stderr io.Writer) error {
			if err := c.Delete(ctx, args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(stdout, "deleted %s\n", args[0])
			return err
		},
	},
	"health": {
		synopsis: "[--pid PID]",
		about:    "Waits until the orchestrator answers /healthz. With --pid, the one answering must be that process, and health fails at once when that process has exited.",
		flags:    func(fs *cli.FlagSet) any { return fs.Int("pid", 0, "the orchestrator's process id") },
		run: func(ctx context.Context, c *client.Client, wait time.Duration, opts any, _ []string, _, _ io.Writer) error {
			hctx, cancel := context.WithTimeout(ctx, wait)
			defer cancel()
			pid := *opts.(*int)
			if pid == 0 {
				return c.WaitHealthy(hctx)
			}
			return c.WaitHealthyPID(hctx, pid, func() bool { return syscall.Kill(pid, 0) == nil })
		},
	},
	"demo": {
		about: "Starts the seed's approval conversation (" + demoPrompt + ") and prints it as it unfolds.",
		flags: noFlags,
		run: func(ctx context.Context, c *client.Client, wait time.Duration, _ any, _ []string, stdout, stderr io.Writer) error {
			return demo(ctx, c, wait, stdout, stderr)
		},
	},
}

func watch(ctx context.Context, c *client.Client, id string, wait time.Duration, stdout, stderr io.Writer) error {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	conv, err := c.Follow(wctx, id, stdout, stderr)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		// The wait ran out, not the conversation: say so in words.
		state := "not answering"
		if conv != nil {
			state = "still " + conv.Status
		}
		return fmt.Errorf("gave up waiting after %s; conversation %s is %s (wait longer with --wait, or watch it again: toolgate watch %s)", wait, id, state, id)
	}
	if err != nil {
		return err
	}
	return printConversation(conv, stdout)
}

func demo(ctx context.Context, c *client.Client, wait time.Duration, stdout, stderr io.Writer) error {
	hctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if err := c.WaitHealthy(hctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "▶ prompt: %s\n", demoPrompt)
	rs, err := c.StartRun(ctx, demoPrompt, "")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "▶ conversation %s, run %s\n", rs.ConversationID, rs.RunID)
	return watch(ctx, c, rs.ConversationID, wait, stdout, stderr)
}

func printConversation(conv *client.Conversation, stdout io.Writer) error {
	fmt.Fprintf(stdout, "\n── conversation %s: %s (%d runs) ──\n", conv.ConversationID, conv.Status, len(conv.Runs))
	if err := client.WriteTranscript(stdout, conv.Messages); err != nil {
		return err
	}
	switch {
	case conv.Status == "cancelled":
		return fmt.Errorf("conversation %s cancelled", conv.ConversationID)
	case conv.Error != "":
		return fmt.Errorf("conversation %s failed: %s", conv.ConversationID, conv.Error)
	}
	return nil
}

func jsonFlag(fs *cli.FlagSet) any {
	return fs.Bool("json", false, "print JSON (the API's answer) instead of a table")
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
