package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/client"
)

type grantOpts struct {
	client.GrantOptions
	deny        bool
	args, until string
	json        bool
}

var grantCommand = subcommand{
	synopsis: "[--deny [--message M]] [--conversation ID] [--args JSON | --args-digest D] [--caller ID] [--ttl D | --until T] TOOL",
	args:     1,
	about: "Gives a standing decision: every later approval call of TOOL that the flags narrow it to is approved (or, with --deny, denied) " +
		"when its run pauses, without asking anyone, until --ttl or --until (RFC 3339) ends it or it is revoked. Prints the grant.",
	flags: func(fs *cli.FlagSet) any {
		o := &grantOpts{}
		fs.BoolVar(&o.deny, "deny", false, "a standing denial instead of an approval")
		fs.StringVar(&o.Message, "message", "", "--deny: what the model is told")
		fs.StringVar(&o.ConversationID, "conversation", "", "only the calls of this conversation")
		fs.StringVar(&o.args, "args", "", "only calls with exactly these args (a JSON object)")
		fs.StringVar(&o.ArgsDigest, "args-digest", "", "only calls with these args, by their args_digest")
		fs.StringVar(&o.Caller, "caller", "", `only runs whose caller object has this "id"`)
		fs.StringVar(&o.TTL, "ttl", "", "how long it stands (e.g. 8h)")
		fs.StringVar(&o.until, "until", "", "when it ends (RFC 3339)")
		fs.BoolVar(&o.json, "json", false, "print the grant as JSON")
		return o
	},
	run: func(ctx context.Context, c *client.Client, _ time.Duration, opts any, args []string, stdout, _ io.Writer) error {
		o := opts.(*grantOpts)
		g := o.GrantOptions
		g.Tool, g.Approved = args[0], !o.deny
		if o.Message != "" && !o.deny {
			return &cli.UsageError{Command: "grant", Err: fmt.Errorf("--message is for --deny")}
		}
		if o.args != "" {
			if !json.Valid([]byte(o.args)) {
				return fmt.Errorf("--args: %q is not JSON", o.args)
			}
			g.Args = json.RawMessage(o.args)
		}
		if o.until != "" {
			t, err := time.Parse(time.RFC3339, o.until)
			if err != nil {
				return fmt.Errorf("--until: %q is not an RFC 3339 time", o.until)
			}
			g.ExpiresAt = &t
		}
		out, err := c.GiveGrant(ctx, g)
		if err != nil {
			return err
		}
		if o.json {
			return writeJSON(stdout, out)
		}
		return grantTable(stdout, []client.Grant{out})
	},
}

var grantsCommand = subcommand{
	synopsis: "[--json]", args: 0,
	about: "Prints the standing decisions stored, with why one does not apply (expired, unsigned, …).",
	flags: jsonFlag,
	run: func(ctx context.Context, c *client.Client, _ time.Duration, opts any, _ []string, stdout, _ io.Writer) error {
		gs, err := c.Grants(ctx)
		if err != nil {
			return err
		}
		if *opts.(*bool) {
			return writeJSON(stdout, gs)
		}
		return grantTable(stdout, gs)
	},
}

var revokeCommand = subcommand{
	synopsis: "GRANT_ID", args: 1, flags: noFlags,
	about: "Revokes a standing decision: calls made after it are asked about again.",
	run: func(ctx context.Context, c *client.Client, _ time.Duration, _ any, args []string, stdout, _ io.Writer) error {
		if err := c.RevokeGrant(ctx, args[0]); err != nil {
			return err
		}
		_, err := fmt.Fprintf(stdout, "revoked %s\n", args[0])
		return err
	},
}

func grantTable(w io.Writer, gs []client.Grant) error {
	if len(gs) == 0 {
		_, err := fmt.Fprintln(w, "no grants")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOOL\tDECISION\tSCOPE\tBY\tEXPIRES\tIGNORED")
	for _, g := range gs {
		decision := "approve"
		if !g.Approved {
			decision = "deny"
		}
		var scope []string
		if g.ConversationID != "" {
			scope = append(scope, "conversation="+g.ConversationID)
		}
		if g.ArgsDigest != "" {
			scope = append(scope, "args="+g.ArgsDigest[:12])
		}
		if g.Caller != "" {
			scope = append(scope, "caller="+g.Caller)
		}
		if len(scope) == 0 {
			scope = append(scope, "every call")
		}
		expires := "never"
		if !g.ExpiresAt.IsZero() {
			expires = g.ExpiresAt.UTC().Format(time.RFC3339)
		}
		ignored := g.Ignored
		if ignored == "" {
			ignored = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.ID, g.Tool, decision, strings.Join(scope, " "), g.GrantedBy, expires, ignored)
	}
	return tw.Flush()
}
