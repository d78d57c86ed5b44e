// Command payments-agent is a program that embeds a toolgate orchestrator:
// the payments agent, its Go tools run in its runs, its model on an
// OpenAI-compatible endpoint, the API on the program's own mux beside its
// other routes.
//
//	OPENAI_API_KEY=… payments-agent -nats nats://127.0.0.1:4222 -listen 127.0.0.1:8081
package main

import (
	"context"
	"errors"
	"flag"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"example.com/toolgate-go-sdk/payments"
	"github.com/toolgate/toolgate"
)

const agentYAML = `
name: payments
model: {provider: openai, name: gpt-4o-mini, api_key_env: OPENAI_API_KEY}
instructions: You pay people. Convert euros to cents before paying.
`

func main() {
	url := flag.String("nats", nats.DefaultURL, "NATS server URL")
	listen := flag.String("listen", "127.0.0.1:8081", "HTTP address of the API")
	over := flag.Int("approval-over", 10_000, "payments above this many cents wait for an approver")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	nc, err := nats.Connect(*url, nats.Name("payments-agent"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	tools, err := payments.Tools()
	if err != nil {
		log.Fatal(err)
	}
	o, err := toolgate.New(nc, toolgate.Config{
		Agent: []byte(agentYAML), LookupEnv: os.LookupEnv,
		Tools: tools, Deps: &payments.Deps{ApprovalOverCents: *over},
		Logger: slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := o.Start(ctx); err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", o.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	srv := &http.Server{Addr: *listen, Handler: mux}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Print(err)
			stop()
		}
	}()
	<-ctx.Done()
	// Stop taking requests, then let the runs under way store their end.
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv.Shutdown(shutdown)
	if err := o.Stop(shutdown); err != nil {
		log.Print(err)
	}
}
