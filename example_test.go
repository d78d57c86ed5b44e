package toolgate_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/agenttool"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/internal/bus/embedded"
)

// greeter is a Model written in Go: it calls the greet tool once, then
// answers with what the tool returned.
type greeter struct{}

func (greeter) Name() string { return "greeter" }

func (greeter) Request(_ context.Context, req toolgate.ModelRequest) (toolgate.ModelResponse, error) {
	last := req.Messages[len(req.Messages)-1]
	for _, p := range last.Parts {
		if p.Kind == toolgate.PartToolReturn {
			return toolgate.ModelResponse{Parts: []toolgate.Part{{Kind: toolgate.PartText, Content: string(p.Value)}}}, nil
		}
	}
	return toolgate.ModelResponse{Parts: []toolgate.Part{{
		Kind: toolgate.PartToolCall, ToolName: "greet", ToolCallID: "c1", Args: []byte(`{"name":"Ada"}`),
	}}}, nil
}

// An orchestrator in the program's process, on its NATS connection, with
// its own model and an in-process tool that reads the program's Deps; the
// API is mounted on the program's server and a client drives a run.
func Example() {
	// The program's NATS server; in production, the cluster it already has.
	dir, _ := os.MkdirTemp("", "toolgate-example")
	defer os.RemoveAll(dir)
	srv, err := embedded.StartServer(embedded.ServerConfig{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		panic(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	defer nc.Close()

	type deps struct{ greeting string }
	greet, err := agenttool.New("greet", "Greet someone.", func(rc *agenttool.RunContext, a struct {
		Name string `json:"name"`
	}) (string, error) {
		return rc.Deps.(deps).greeting + ", " + a.Name, nil
	})
	if err != nil {
		panic(err)
	}
	o, err := toolgate.New(nc, toolgate.Config{
		Agent: []byte("model: {provider: test}\ninstructions: Greet people.\n"),
		Model: greeter{}, Tools: []agenttool.Tool{greet}, Deps: deps{greeting: "Hello"},
		SetUp: true,
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := o.Start(ctx); err != nil {
		panic(err)
	}
	defer o.Stop(ctx)
	api := httptest.NewServer(o.Handler())
	defer api.Close()

	c, err := client.New(client.Config{BaseURL: api.URL})
	if err != nil {
		panic(err)
	}
	run, err := c.Start(ctx, client.StartRequest{Prompt: "Greet Ada."})
	if err != nil {
		panic(err)
	}
	conv, err := c.Wait(ctx, run.ConversationID)
	if err != nil {
		panic(err)
	}
	fmt.Println(conv.Status, string(conv.Output))
	// Output: completed "\"Hello, Ada\""
}
