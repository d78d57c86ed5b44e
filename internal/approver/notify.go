package approver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// Notifier is a Decider that decides nothing: it posts each approval
// request to a webhook as Slack-style JSON (an incoming webhook's
// {"text", "blocks"}) with a link to the request's card in the approval
// inbox, and escalates it, so that people learn of a pending approval
// without watching a page. A webhook that fails hands the request back: it
// is posted again when it is redelivered. Run it with Config.AllRequests,
// so that it posts the requests its approver id may not decide too; the
// message names who may (the request's approvers).
type Notifier struct {
	// Webhook is the URL posted to. Required.
	Webhook string
	// InboxURL is the approval inbox's base URL (approver --http); the
	// message links to the request's card there. Empty: no link.
	InboxURL string
	// HTTP posts; nil uses a client with a 10 s timeout.
	HTTP *http.Client
}

// NotifyMessage is the JSON posted for a request: Slack's incoming-webhook
// form, which Mattermost, Rocket.Chat and others read too.
type NotifyMessage struct {
	Text   string `json:"text"`
	Blocks []any  `json:"blocks"`
}

// Decide posts req and escalates it.
func (n *Notifier) Decide(ctx context.Context, req wire.ApprovalRequest) (Verdict, error) {
	if n.Webhook == "" {
		return Verdict{}, errors.New("notify: no webhook")
	}
	raw, err := json.Marshal(n.Message(req))
	if err != nil {
		return Verdict{}, fmt.Errorf("notify: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, n.Webhook, bytes.NewReader(raw))
	if err != nil {
		return Verdict{}, fmt.Errorf("notify: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hc := n.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		// The URL may hold the webhook's secret: say only what failed.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Verdict{}, fmt.Errorf("notify: post to the webhook: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return Verdict{}, fmt.Errorf("notify: the webhook answered %s", resp.Status)
	}
	return Verdict{Action: ActionEscalate, Rule: -1}, nil
}

// CardURL is the link to req's card in the inbox at base; "" without base.
func CardURL(base string, req wire.ApprovalRequest) string {
	if base == "" {
		return ""
	}
	return strings.TrimRight(base, "/") + "/#call-" + url.PathEscape(req.RunID) + "/" + url.PathEscape(req.ToolCallID)
}

// Message is what Decide posts for req.
func (n *Notifier) Message(req wire.ApprovalRequest) NotifyMessage {
	args := string(req.Args)
	if c, err := wire.CanonicalJSON(req.Args); err == nil {
		args = string(c)
	}
	if len(args) > 500 {
		args = args[:500] + "…"
	}
	text := fmt.Sprintf("Approval needed: %s %s (conversation %s, call %s", req.ToolName, args, req.ConversationID, req.ToolCallID)
	if !req.Deadline.IsZero() {
		text += ", decide before " + req.Deadline.UTC().Format(time.RFC3339)
	}
	if len(req.Approvers) > 0 {
		text += ", for " + strings.Join(req.Approvers, ", ")
	}
	text += ")"
	link := CardURL(n.InboxURL, req)
	mrkdwn := fmt.Sprintf("*Approval needed:* `%s`\n```%s```\nconversation `%s`, call `%s`", req.ToolName, args, req.ConversationID, req.ToolCallID)
	if len(req.Metadata) > 0 {
		mrkdwn += "\nreason: `" + string(req.Metadata) + "`"
	}
	if !req.Deadline.IsZero() {
		mrkdwn += "\ndecide before " + req.Deadline.UTC().Format(time.RFC3339)
	}
	if len(req.Approvers) > 0 {
		mrkdwn += "\nfor " + strings.Join(req.Approvers, ", ")
	}
	blocks := []any{map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": mrkdwn}}}
	if link != "" {
		text += " " + link
		blocks = append(blocks, map[string]any{"type": "actions", "elements": []any{map[string]any{
			"type": "button", "text": map[string]any{"type": "plain_text", "text": "Open in the inbox"}, "url": link,
		}}})
	}
	return NotifyMessage{Text: text, Blocks: blocks}
}
