package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/wire"
)

const notifySynopsis = "approver notify --webhook URL [--inbox-url URL] [flags]"

// notify runs the notifier bot: each approval request is posted to a
// webhook (Slack-style JSON) with a link to its inbox card and left
// pending for the approvers.
func notify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet(cli.Command{Name: "approver notify", Usage: []string{notifySynopsis},
		About: "Posts each approval request to the webhook as Slack-style JSON ({\"text\", \"blocks\"}) with a link to its card in the inbox, and decides nothing.",
		Env:   env})
	cf := commonFlags(fs)
	webhook := fs.String("webhook", "", "URL to post each approval request to (a Slack, Mattermost, … incoming webhook)")
	inboxURL := fs.String("inbox-url", "", "base URL of the approval inbox (approver --http) the message links to")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	pos, err := fs.Parse(args, stdout)
	if err != nil {
		return err
	}
	cf.idFromUser(fs)
	if len(pos) != 0 {
		return cli.Usagef("approver notify", "unexpected argument %q", pos[0])
	}
	for name, v := range map[string]string{"webhook": *webhook, "inbox-url": *inboxURL} {
		if v == "" && name == "inbox-url" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cli.Usagef("approver notify", "--%s: want an http(s) URL", name)
		}
	}
	if err := wire.ValidateToken("--id", cf.id); err != nil {
		return err
	}
	if err := cf.nats.Check(); err != nil {
		return err
	}
	logger, err := cli.Logger(stderr, *logLevel, "log-level")
	if err != nil {
		return err
	}
	filter, err := cf.filter()
	if err != nil {
		return err
	}
	b, err := cf.nats.Connect(ctx, cf.id, bus.RoleApprover, logger)
	if err != nil {
		return err
	}
	defer b.Close()
	// Every request is posted, those of tools whose approvers do not name
	// this id included: people, not this bot, decide them.
	a, err := approver.New(approver.Config{Bus: b, ID: cf.id, Filter: filter, Logger: logger, AllRequests: true,
		Decider: &approver.Notifier{Webhook: *webhook, InboxURL: *inboxURL}})
	if err != nil {
		return fmt.Errorf("approver notify: %w", err)
	}
	logger.Info("notifying", slog.String("id", cf.id), slog.Bool("inbox_link", *inboxURL != ""))
	return a.Run(ctx)
}
