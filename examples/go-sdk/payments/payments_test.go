package payments_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"

	"example.com/toolgate-go-sdk/payments"
	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/toolgatetest"
)

// The agent's tools all come from Go.
const agentYAML = `
model: {provider: script, script: script.yaml}
instructions: You pay people.
`

const scriptYAML = `
- calls:
    - {tool: convert, id: c1, args: {euros: 250}}
- calls:
    - {tool: pay, id: p1, args: {cents: 25000, to: alice}}
- text: Paid alice.
`

// An embedded agent: its Go tools run in the orchestrator's run, the large
// payment waits for an approval bot that sees the reason the tool gave
// (computed from the run's history), and the approved call runs in
// process.
func TestEmbeddedAgentPaysAfterApproval(t *testing.T) {
	tools, err := payments.Tools()
	if err != nil {
		t.Fatal(err)
	}
	sys := toolgatetest.Start(t, toolgatetest.Options{
		Agent:    []byte(agentYAML),
		AgentDir: fstest.MapFS{"script.yaml": {Data: []byte(scriptYAML)}},
		Tools:    tools,
		Deps:     &payments.Deps{ApprovalOverCents: 10_000},
	})
	var reason struct {
		Reason  string `json:"reason"`
		Over    int    `json:"over"`
		History int    `json:"history"`
	}
	sys.Approve("bot", nil, approval.DeciderFunc(func(_ context.Context, req approval.Request) (approval.Verdict, error) {
		if err := json.Unmarshal(req.Metadata, &reason); err != nil {
			return approval.Deny("no reason given"), nil
		}
		return approval.Approve(), nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()
	run, err := sys.Client.Start(ctx, client.StartRequest{Prompt: "Pay alice 250 euros."})
	if err != nil {
		t.Fatal(err)
	}
	conv, err := sys.Client.Wait(ctx, run.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	var output string
	if err := json.Unmarshal(conv.Output, &output); conv.Status != client.StatusCompleted || err != nil || output != "Paid alice." {
		t.Fatalf("conversation %s: %s (%v)", conv.Status, conv.Output, err)
	}
	if reason.Reason != "large payment" || reason.Over != 10_000 || reason.History != 4 {
		t.Errorf("the bot saw the reason %+v, want large payment over 10000 (from Deps) after 4 messages", reason)
	}
	var all []string
	for _, m := range conv.Messages {
		all = append(all, string(m))
	}
	if !strings.Contains(strings.Join(all, "\n"), "paid 25000 cents to alice") {
		t.Errorf("history lacks the payment:\n%s", strings.Join(all, "\n"))
	}
}
