package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/toolgate/toolgate/internal/agent"
)

// benchAgent answers with n calls of a trivial tool, then with text.
func benchAgent(b *testing.B, n int) *agent.Agent {
	b.Helper()
	cs := make([]agent.ScriptCall, n)
	for i := range cs {
		cs[i] = agent.ScriptCall{Tool: "echo", ID: fmt.Sprintf("c%d", i), Args: json.RawMessage(`{"x":1}`)}
	}
	tool, err := agent.NewTool("echo", "", func(_ *agent.RunContext, a struct {
		X int `json:"x"`
	}) (int, error) {
		return a.X, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	a, err := agent.New(agent.Config{
		Model: agent.NewScriptModel("", []agent.ScriptResponse{{Calls: cs}, {Text: "all done now"}}),
		Tools: []agent.Tool{tool},
	})
	if err != nil {
		b.Fatal(err)
	}
	return a
}

func BenchmarkRun(b *testing.B) {
	a := benchAgent(b, 8)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Run(ctx, agent.RunInput{Prompt: "go"}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEvents(b *testing.B) {
	a := benchAgent(b, 8)
	ctx := context.Background()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for _, err := range a.Events(ctx, agent.RunInput{Prompt: "go"}) {
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
	}
	b.ReportMetric(float64(n)/float64(b.N), "events/op")
}
