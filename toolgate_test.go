package toolgate_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/agenttool"
	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/toolgatetest"
)

func TestNewRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name, agent, want string
	}{
		{"no agent", "", "Config.Agent is required"},
		{"unknown field", "model: {provider: test}\ntols: []\n", "tols"},
		{"no tools", "model: {provider: test}\n", "at least one tool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := toolgate.New(&nats.Conn{}, toolgate.Config{Agent: []byte(tc.agent)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

type limits struct{ maxAmount int }

// An approval rule written in Go sees the program's Deps: a payment over
// the limit Deps holds waits for an approver, with the reason it gives.
func TestApprovalRuleSeesDeps(t *testing.T) {
	type payArgs struct {
		Amount int `json:"amount"`
	}
	pay, err := agenttool.New("pay", "Pay an amount.", func(_ *agenttool.RunContext, a payArgs) (string, error) {
		return "paid", nil
	}, agenttool.RequireApproval(func(rc *agenttool.RunContext, a payArgs) (any, bool) {
		limit := rc.Deps.(limits).maxAmount
		return map[string]int{"limit": limit}, a.Amount > limit
	}))
	if err != nil {
		t.Fatal(err)
	}
	sys := toolgatetest.Start(t, toolgatetest.Options{
		Agent: []byte("model: {provider: test}\n"),
		Model: payModel{amount: 500}, Tools: []agenttool.Tool{pay}, Deps: limits{maxAmount: 100},
	})
	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()
	run, err := sys.Client.Start(ctx, client.StartRequest{Prompt: "Pay 500."})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Client.Wait(ctx, run.ConversationID, client.StatusPaused); err != nil {
		t.Fatal(err)
	}
	pending, err := sys.Client.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].ToolName != "pay" {
		t.Fatalf("pending = %+v, want the pay call", pending)
	}
	var reason map[string]int
	if err := json.Unmarshal(pending[0].Metadata, &reason); err != nil || reason["limit"] != 100 {
		t.Fatalf("reason = %s (%v), want the limit from Deps", pending[0].Metadata, err)
	}
}

// payModel calls pay with its amount, then answers with the tool's return.
type payModel struct{ amount int }

func (payModel) Name() string { return "pay-model" }

func (m payModel) Request(_ context.Context, req toolgate.ModelRequest) (toolgate.ModelResponse, error) {
	for _, p := range req.Messages[len(req.Messages)-1].Parts {
		if p.Kind == toolgate.PartToolReturn {
			return toolgate.ModelResponse{Parts: []toolgate.Part{{Kind: toolgate.PartText, Content: string(p.Value)}}}, nil
		}
	}
	args, _ := json.Marshal(map[string]int{"amount": m.amount})
	return toolgate.ModelResponse{Parts: []toolgate.Part{{Kind: toolgate.PartToolCall, ToolName: "pay", ToolCallID: "p1", Args: args}}}, nil
}

// Tools and approval rules see who asked (RunContext.Caller, from the
// start request's caller): a manager's payment runs at once, a clerk's
// waits for an approver with the role as its reason; the conversation
// shows its caller; a caller that is not a JSON object is refused.
func TestApprovalRuleSeesCaller(t *testing.T) {
	type payArgs struct {
		Amount int `json:"amount"`
	}
	type caller struct {
		User string `json:"user"`
		Role string `json:"role"`
	}
	who := func(rc *agenttool.RunContext) (c caller) {
		_ = json.Unmarshal(rc.Caller, &c)
		return c
	}
	pay, err := agenttool.New("pay", "Pay an amount.", func(rc *agenttool.RunContext, a payArgs) (string, error) {
		return "paid for " + who(rc).User, nil
	}, agenttool.RequireApproval(func(rc *agenttool.RunContext, a payArgs) (any, bool) {
		role := who(rc).Role
		return map[string]string{"role": role}, role != "manager"
	}))
	if err != nil {
		t.Fatal(err)
	}
	sys := toolgatetest.Start(t, toolgatetest.Options{
		Agent: []byte("model: {provider: test}\n"),
		Model: payModel{amount: 500}, Tools: []agenttool.Tool{pay},
	})
	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()

	run, err := sys.Client.Start(ctx, client.StartRequest{Prompt: "Pay 500.", Caller: json.RawMessage(`{"user":"mia","role":"manager"}`)})
	if err != nil {
		t.Fatal(err)
	}
	conv, err := sys.Client.Wait(ctx, run.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	if conv.Status != client.StatusCompleted || !strings.Contains(string(conv.Output), "paid for mia") {
		t.Errorf("the manager's payment: %s %s, want completed, paid for mia", conv.Status, conv.Output)
	}

	clerk := json.RawMessage(`{"user":"carl","role":"clerk"}`)
	run, err = sys.Client.Start(ctx, client.StartRequest{Prompt: "Pay 500.", Caller: clerk})
	if err != nil {
		t.Fatal(err)
	}
	if conv, err = sys.Client.Wait(ctx, run.ConversationID, client.StatusPaused); err != nil {
		t.Fatal(err)
	}
	if string(conv.Caller) != string(clerk) {
		t.Errorf("conversation caller %s, want %s", conv.Caller, clerk)
	}
	pending, err := sys.Client.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || string(pending[0].Metadata) != `{"role":"clerk"}` {
		t.Errorf("pending = %+v, want the clerk's payment held with its role", pending)
	}
	// Approved, the payment runs in the follow-up run, which sees the same
	// caller: the conversation keeps it across the pause.
	sys.Approve("boss", nil, approval.DeciderFunc(func(context.Context, approval.Request) (approval.Verdict, error) {
		return approval.Approve(), nil
	}))
	if conv, err = sys.Client.Wait(ctx, run.ConversationID); err != nil {
		t.Fatal(err)
	}
	if conv.Status != client.StatusCompleted || !strings.Contains(string(conv.Output), "paid for carl") {
		t.Errorf("the clerk's approved payment: %s %s, want completed, paid for carl", conv.Status, conv.Output)
	}

	_, err = sys.Client.Start(ctx, client.StartRequest{Prompt: "Pay 500.", Caller: json.RawMessage(`["carl"]`)})
	if err == nil || !strings.Contains(err.Error(), "caller: not a JSON object") {
		t.Errorf("start with a caller that is not an object: %v", err)
	}
}
