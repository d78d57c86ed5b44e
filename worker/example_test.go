package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/wire"
	"github.com/toolgate/toolgate/worker"
)

// A worker with one typed tool. The schema of its args comes from the
// struct; the reply is what the function returns.
func Example() {
	nc, stop := exampleServer()
	defer stop()

	w, _ := worker.New(nc, worker.Config{ID: "weather-1"})
	_ = worker.Register(w, "get_weather", "Current weather of a city",
		func(ctx context.Context, call worker.Call, a struct {
			City string `json:"city"`
		}) (string, error) {
			return "sunny in " + a.City, nil
		})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()

	// What the orchestrator would send, and the reply the worker stores.
	reply := exampleCall(nc, "get_weather", "call_1", `{"city":"Paris"}`)
	fmt.Println(reply.Outcome, string(reply.Value), reply.WorkerID)
	cancel()
	fmt.Println(<-done)
	// Output:
	// return "sunny in Paris" weather-1
	// <nil>
}

// A handler answers with a value, with Retry (the model is told what was
// wrong and may call again) or with Fail (the call failed).
func ExampleRetry() {
	nc, stop := exampleServer()
	defer stop()

	w, _ := worker.New(nc, worker.Config{ID: "orders-1", NoAdvertise: true})
	_ = w.Handle(worker.Tool{Name: "cancel_order", Handler: worker.HandlerFunc(
		func(ctx context.Context, call worker.Call) (worker.Reply, error) {
			var a struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(call.Args, &a); err != nil || a.ID == "" {
				return worker.Reply{}, worker.Retry(`give the order as {"id": "..."}`)
			}
			if a.ID == "7" {
				return worker.Reply{}, worker.Fail("order %s has shipped", a.ID)
			}
			return worker.Return("cancelled " + a.ID)
		})})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()

	for i, args := range []string{`{"order":"5"}`, `{"id":"7"}`, `{"id":"5"}`} {
		r := exampleCall(nc, "cancel_order", fmt.Sprint("call_", i), args)
		fmt.Println(r.Outcome, r.Message+string(r.Value))
	}
	cancel()
	fmt.Println(<-done)
	// Output:
	// retry give the order as {"id": "..."}
	// failed order 7 has shipped
	// return "cancelled 5"
	// <nil>
}

// exampleServer starts an embedded server with toolgate's streams, as the
// orchestrator sets them up, and returns a plain connection to it.
func exampleServer() (*nats.Conn, func()) {
	dir, _ := os.MkdirTemp("", "toolgate-example")
	srv, err := embedded.StartServer(embedded.ServerConfig{StoreDir: dir, Listen: "127.0.0.1:-1"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	b, _ := srv.Connect(ctx, bus.ConnConfig{})
	if err := b.Setup(ctx, bus.SetupConfig{}); err != nil {
		panic(err)
	}
	b.Close()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		panic(err)
	}
	return nc, func() { nc.Close(); srv.Shutdown(); os.RemoveAll(dir) }
}

// exampleCall publishes call id to tool and waits for its reply.
func exampleCall(nc *nats.Conn, tool, id, args string) wire.CallReply {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, _ := bus.FromConn(nc, bus.ConnConfig{})
	req := wire.CallRequest{RunID: "r1", ConversationID: "c1", ToolCallID: id, ToolName: tool,
		Args: json.RawMessage(args), Deadline: time.Now().Add(time.Minute)}
	if _, err := b.PublishCall(ctx, req); err != nil {
		panic(err)
	}
	got := make(chan wire.CallReply, 1)
	sub, _ := b.ConsumeReplies(ctx, "example", bus.ConsumeConfig{}, bus.HandlerFunc[bus.Reply](
		func(_ context.Context, d *bus.Delivery[bus.Reply]) error {
			if d.Msg.Call != nil && d.Msg.Call.ToolCallID == id {
				got <- *d.Msg.Call
			}
			return nil
		}))
	defer sub.Stop(context.Background())
	return <-got
}
