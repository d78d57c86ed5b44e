package toolgate_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/agenttool"
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
