package toolgate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate"
	"github.com/toolgate/toolgate/agenttool"
	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/deferred"
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

// asker calls calculate_answer once, then answers with the tool return it
// got: its value and the metadata kept on it.
type asker struct{}

func (asker) Name() string { return "asker" }

func (asker) Request(_ context.Context, req toolgate.ModelRequest) (toolgate.ModelResponse, error) {
	for _, p := range req.Messages[len(req.Messages)-1].Parts {
		if p.Kind == toolgate.PartToolReturn {
			return toolgate.ModelResponse{Parts: []toolgate.Part{{
				Kind: toolgate.PartText, Content: fmt.Sprintf("%s %s %s", p.Outcome, p.Value, p.Metadata),
			}}}, nil
		}
	}
	return toolgate.ModelResponse{Parts: []toolgate.Part{{
		Kind: toolgate.PartToolCall, ToolName: "calculate_answer", ToolCallID: "c1",
		Args: []byte(`{"question":"life, the universe and everything"}`),
	}}}, nil
}

// A Go tool defers its call with metadata (Pydantic AI's CallDeferred), and
// an inline handler answers the external call with the public constructors
// of package deferred, here a return whose metadata the model does not see.
func Example_deferredCall() {
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

	calculate, err := agenttool.New("calculate_answer", "Calculate an answer; it takes a while.",
		func(_ *agenttool.RunContext, a struct {
			Question string `json:"question"`
		}) (int, error) {
			return 0, deferred.CallDeferred(map[string]string{"task_id": "task_0"})
		})
	if err != nil {
		panic(err)
	}
	tasks := agenttool.HandlerFunc(func(_ *agenttool.RunContext, req *deferred.Requests) (*deferred.Results, error) {
		res := &deferred.Results{Calls: map[string]deferred.Result{}}
		for _, call := range req.Calls {
			var meta struct {
				TaskID string `json:"task_id"`
			}
			if err := json.Unmarshal(req.Metadata[call.ToolCallID], &meta); err != nil || meta.TaskID == "" {
				res.Calls[call.ToolCallID] = deferred.AskRetry("No result for this tool call was found.")
				continue
			}
			answer, err := deferred.ReturnOf(42, "", map[string]string{"task_id": meta.TaskID})
			if err != nil {
				return nil, err
			}
			res.Calls[call.ToolCallID] = answer
		}
		return res, nil
	})
	o, err := toolgate.New(nc, toolgate.Config{
		Agent: []byte("model: {provider: test}\ninstructions: Answer questions.\n"),
		Model: asker{}, Tools: []agenttool.Tool{calculate}, Handlers: []agenttool.Handler{tasks},
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
	run, err := c.Start(ctx, client.StartRequest{Prompt: "What is the answer to the ultimate question?"})
	if err != nil {
		panic(err)
	}
	conv, err := c.Wait(ctx, run.ConversationID)
	if err != nil {
		panic(err)
	}
	fmt.Println(conv.Status, string(conv.Output))
	// Output: completed "success 42 {\"task_id\":\"task_0\"}"
}
