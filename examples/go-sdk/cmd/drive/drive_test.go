package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"

	"example.com/toolgate-go-sdk/mail"
	"example.com/toolgate-go-sdk/policy"
	"example.com/toolgate-go-sdk/weather"
	"github.com/toolgate/toolgate/approval"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/worker"
)

const agentYAML = `
model: {provider: script, script: script.yaml}
instructions: You report the weather by mail.
tools:
  - name: get_weather
    description: Current weather of a city.
    parameters:
      type: object
      properties: {city: {type: string}, unit: {type: string}}
      required: [city]
  - name: send_mail
    description: Send an email.
    parameters:
      type: object
      properties: {to: {type: string}, subject: {type: string}}
      required: [to, subject]
    approval: always
`

// The model (a script here) asks for the weather in a city the tool does
// not know, then in Paris, then mails it; the Go worker answers, the bot
// reroutes the mail to review, and the conversation completes.
const scriptYAML = `
- calls:
    - {tool: get_weather, id: w1, args: {city: Atlantis}}
- calls:
    - {tool: get_weather, id: w2, args: {city: Paris, unit: fahrenheit}}
- calls:
    - {tool: send_mail, id: m1, args: {to: boss@example.com, subject: "Paris: 69.8F, sunny"}}
- text: I mailed the weather in Paris.
`

func TestDriveToCompletion(t *testing.T) {
	sys := toolgatetest.Start(t, toolgatetest.Options{
		Agent:    []byte(agentYAML),
		AgentDir: fstest.MapFS{"script.yaml": {Data: []byte(scriptYAML)}},
	})
	w, err := worker.New(sys.Conn(), worker.Config{ID: "weather-1"})
	if err != nil {
		t.Fatal(err)
	}
	var outbox mail.Outbox
	if err := weather.Register(w); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Register(w); err != nil {
		t.Fatal(err)
	}
	sys.Go("worker", w.Run)
	sys.Approve("go-bot", nil, approval.DeciderFunc(policy.Decide))

	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()
	var lines []string
	conv, err := Drive(ctx, sys.Client, "Mail the weather in Paris to my boss.", func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatal(err)
	}
	var output string
	if err := json.Unmarshal(conv.Output, &output); conv.Status != "completed" || err != nil || output != "I mailed the weather in Paris." {
		t.Fatalf("conversation %s, output %s (%v); events:\n%s", conv.Status, conv.Output, err, strings.Join(lines, "\n"))
	}
	sent := outbox.Sent()
	if len(sent) != 1 || sent[0].To != "review@example.com" || sent[0].Subject != "Paris: 69.8F, sunny" {
		t.Errorf("sent = %+v, want one mail rerouted to review", sent)
	}
	// The model saw the retry for Atlantis and the Fahrenheit forecast.
	all := strings.Join(messages(t, conv.Messages), "\n")
	for _, want := range []string{`no weather for \"Atlantis\"`, `"temp":69.8`, "sent to review@example.com"} {
		if !strings.Contains(all, want) {
			t.Errorf("messages lack %s:\n%s", want, all)
		}
	}
}

func messages(t *testing.T, raw []json.RawMessage) []string {
	t.Helper()
	var out []string
	for _, m := range raw {
		out = append(out, string(m))
	}
	return out
}
