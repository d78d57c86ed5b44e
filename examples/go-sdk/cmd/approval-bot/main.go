// Command approval-bot decides approval requests with policy.Decide,
// signing its decisions with the key in -key (an `approver keygen` file).
//
//	approval-bot -nats nats://127.0.0.1:4222 -key bot.key
package main

import (
	"context"
	"crypto/ed25519"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"

	"example.com/toolgate-go-sdk/policy"
	"github.com/toolgate/toolgate/approval"
)

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS server URL")
	keyFile := flag.String("key", "", "signing key file (empty: unsigned decisions)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var key ed25519.PrivateKey
	if *keyFile != "" {
		var err error
		if key, err = approval.LoadKey(*keyFile); err != nil {
			log.Fatal(err)
		}
	}
	nc, err := nats.Connect(*url, nats.Name("approval-bot"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	bot, err := approval.New(nc, approval.Config{ID: "go-bot", Key: key}, approval.DeciderFunc(policy.Decide))
	if err != nil {
		log.Fatal(err)
	}
	if err := bot.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
