// Command drive starts a conversation, prints its events as they happen
// and exits with the conversation's output once it ends.
//
//	drive -api http://127.0.0.1:8080 "What is the weather in Paris?"
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"

	"github.com/toolgate/toolgate/client"
)

func main() {
	api := flag.String("api", "http://127.0.0.1:8080", "orchestrator URL")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	c, err := client.New(client.Config{BaseURL: *api, Token: os.Getenv("TOOLGATE_TOKEN")})
	if err != nil {
		log.Fatal(err)
	}
	conv, err := Drive(ctx, c, strings.Join(flag.Args(), " "), func(line string) { fmt.Println(line) })
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s\n", conv.Status, conv.Output)
}
