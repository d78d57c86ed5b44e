// Command onetool is the smallest Go worker: one typed tool, served from
// the NATS server at $NATS_URL. The worker package's weight test builds it.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/worker"
)

type args struct {
	City string `json:"city"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	w, err := worker.New(nc, worker.Config{})
	if err != nil {
		log.Fatal(err)
	}
	err = worker.Register(w, "get_weather", "Current weather of a city",
		func(ctx context.Context, call worker.Call, a args) (string, error) {
			return "sunny in " + a.City, nil
		})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
