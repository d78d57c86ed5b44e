// Command weather-worker serves get_weather on a toolgate NATS server.
//
//	weather-worker -nats nats://127.0.0.1:4222
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"

	"example.com/toolgate-go-sdk/weather"
	"github.com/toolgate/toolgate/worker"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS server URL")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	nc, err := nats.Connect(*url, nats.Name("weather-worker"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	w, err := worker.New(nc, worker.Config{ID: "weather-1"})
	if err != nil {
		log.Fatal(err)
	}
	if err := weather.Register(w); err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx); err != nil { // drains on Ctrl-C
		log.Fatal(err)
	}
}
