package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/internal/client"
)

// recordsOptions are the flags of dlq and audit.
type recordsOptions struct {
	client.RecordOptions
	json bool
}

// recordsCommand is dlq or audit: a page of the dead letters or the audit
// records, newest first.
func recordsCommand(name string) subcommand {
	what := map[string]string{
		"dlq":   "Prints the dead letters (messages that could not be handled, TOOLGATE_DLQ)",
		"audit": "Prints the audit records (every decision, refused or late result, TOOLGATE_AUDIT)",
	}[name]
	return subcommand{
		synopsis: "[--conversation ID] [--tool-call-id ID] [--since T] [--limit N] [--cursor C] [--json]", args: 0,
		about: what + ", newest first, as a table (--json: as JSON); pass the next cursor it prints as --cursor for older ones. " +
			"--since is an RFC 3339 time or a duration back from now (90m, 24h).",
		flags: func(fs *cli.FlagSet) any {
			o := &recordsOptions{}
			fs.StringVar(&o.ConversationID, "conversation", "", "only the records of this conversation")
			fs.StringVar(&o.ToolCallID, "tool-call-id", "", "only the records of this tool call")
			fs.StringVar(&o.Since, "since", "", "only the records stored since: an RFC 3339 time or a duration back from now (90m, 24h)")
			fs.IntVar(&o.Limit, "limit", 0, "page size (default: the orchestrator's, 100)")
			fs.StringVar(&o.Cursor, "cursor", "", "the next cursor of the previous page")
			fs.BoolVar(&o.json, "json", false, "print JSON (the API's answer) instead of a table")
			return o
		},
		run: func(ctx context.Context, c *client.Client, _ time.Duration, opts any, _ []string, stdout, _ io.Writer) error {
			o := opts.(*recordsOptions)
			if name == "dlq" {
				page, err := c.DeadLetters(ctx, o.RecordOptions)
				if err != nil {
					return err
				}
				if o.json {
					return writeJSON(stdout, page)
				}
				return deadLetterTable(stdout, page)
			}
			page, err := c.Audit(ctx, o.RecordOptions)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSON(stdout, page)
			}
			return auditTable(stdout, page)
		},
	}
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// orDash keeps a table's columns aligned where a value is missing.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// nextCursor tells how to get the next page, on its own line after the
// table.
func nextCursor(w io.Writer, cursor string) error {
	if cursor == "" {
		return nil
	}
	_, err := fmt.Fprintf(w, "\nmore: --cursor %s\n", cursor)
	return err
}

func pendingTable(w io.Writer, ps []client.Pending, now time.Time) error {
	if len(ps) == 0 {
		_, err := fmt.Fprintln(w, "nothing is waiting")
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "TOOL CALL ID\tKIND\tTOOL\tCONVERSATION\tRUN\tEXPIRES IN\tARGS")
	for _, p := range ps {
		expires := "-"
		if !p.Deadline.IsZero() {
			expires = p.Deadline.Sub(now).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ToolCallID, p.Kind, p.ToolName, orDash(p.ConversationID), orDash(p.RunID), expires, clip(string(p.Args), 60))
	}
	return tw.Flush()
}

func conversationTable(w io.Writer, cs []client.ConversationSummary, cursor string) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "CONVERSATION\tSTATUS\tAGENT\tCREATED\tUPDATED")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.ConversationID, c.Status, orDash(c.Agent), stamp(c.CreatedAt), stamp(c.UpdatedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return nextCursor(w, cursor)
}

func deadLetterTable(w io.Writer, page client.DeadLetterPage) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tSUBJECT\tCONVERSATION\tTOOL CALL ID\tREASON")
	for _, d := range page.DeadLetters {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", d.Seq, stamp(d.Time), d.Kind, d.Subject, orDash(d.ConversationID), orDash(d.ToolCallID), clip(d.Reason, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return nextCursor(w, page.NextCursor)
}

func auditTable(w io.Writer, page client.AuditPage) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "SEQ\tTIME\tKIND\tVERDICT\tCONVERSATION\tTOOL CALL ID\tTOOL\tBY\tDETAIL")
	for _, r := range page.Records {
		by, detail := orDash(r.ApproverID), r.Reason
		if r.WorkerID != "" {
			by = r.WorkerID
		}
		if r.Approved != nil {
			decision := "denied"
			if *r.Approved {
				decision = "approved"
			}
			detail = strings.TrimSpace(decision + " " + detail)
		}
		if len(r.OverrideArgs) > 0 {
			detail += " (args edited)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, stamp(r.Time), r.Kind, r.Verdict, orDash(r.ConversationID), orDash(r.ToolCallID), orDash(r.ToolName), by, orDash(clip(detail, 80)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return nextCursor(w, page.NextCursor)
}
