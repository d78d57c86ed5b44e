package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/worker"
)

// BenchmarkRoundTrip measures one call at a time through JetStream: publish
// a noop call, wait for its reply.
func BenchmarkRoundTrip(b *testing.B) {
	srv, err := embedded.StartServer(embedded.ServerConfig{StoreDir: b.TempDir(), NoListen: true})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown()
	ctx := context.Background()
	bs, err := srv.Connect(ctx, bus.ConnConfig{})
	if err != nil {
		b.Fatal(err)
	}
	defer bs.Close()
	if err := bs.Setup(ctx, bus.SetupConfig{}); err != nil {
		b.Fatal(err)
	}
	builtin, err := worker.NewBuiltin(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	w, err := worker.New(worker.Config{
		Bus:   bs,
		Tools: []worker.Tool{{Spec: worker.ToolSpec{Name: worker.ToolNoop}, Executor: builtin}},
	})
	if err != nil {
		b.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stop()
		<-done
	}()

	replies := make(chan struct{}, 1)
	sub, err := bs.ConsumeReplies(ctx, "bench", bus.ConsumeConfig{}, bus.HandlerFunc[bus.Reply](
		func(context.Context, *bus.Delivery[bus.Reply]) error {
			replies <- struct{}{}
			return nil
		}))
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Stop(ctx)

	i := 0
	for b.Loop() {
		req := call(worker.ToolNoop, fmt.Sprintf("c%d", i), `{"n":1}`)
		i++
		if _, err := bs.PublishCall(ctx, req); err != nil {
			b.Fatal(err)
		}
		select {
		case <-replies:
		case <-time.After(10 * time.Second):
			b.Fatal("no reply")
		}
	}
}
