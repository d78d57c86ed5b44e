package toolgatetest_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/client"
	"github.com/toolgate/toolgate/toolgatetest"
	"github.com/toolgate/toolgate/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const agentYAML = `
model: {provider: script, script: script.yaml}
instructions: You answer questions about the weather.
tools:
  - name: get_weather
    description: Current weather of a city.
    parameters:
      type: object
      properties: {city: {type: string}}
      required: [city]
  - name: delete_file
    description: Delete a file.
    parameters:
      type: object
      properties: {path: {type: string}}
      required: [path]
    approval: always
`

const scriptYAML = `
- calls:
    - {tool: get_weather, id: w1, args: {city: Paris}}
    - {tool: delete_file, id: d1, args: {path: /etc/passwd}}
- text: It is sunny in Paris; I was not allowed to delete the file.
`

// A conversation played through the whole system: the run pauses on a
// worker's call and an approval, the client sees both pending, a Go worker
// and a bot answer them, and the follow-up run completes.
func TestSystemDrivesConversationToCompletion(t *testing.T) {
	sys := toolgatetest.Start(t, toolgatetest.Options{
		Agent:    []byte(agentYAML),
		AgentDir: fstest.MapFS{"script.yaml": {Data: []byte(scriptYAML)}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()

	run, err := sys.Client.Start(ctx, client.StartRequest{Prompt: "Weather in Paris? And delete /etc/passwd.", IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := sys.Client.Start(ctx, client.StartRequest{Prompt: "Weather in Paris? And delete /etc/passwd.", IdempotencyKey: "k1"})
	if err != nil || again.RunID != run.RunID || again.ConversationID != run.ConversationID {
		t.Fatalf("start repeated under its key = %+v, %v; want %+v", again, err, run)
	}
	if _, err := sys.Client.Wait(ctx, run.ConversationID, client.StatusPaused); err != nil {
		t.Fatal(err)
	}
	pending, err := sys.Client.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, p := range pending {
		kinds = append(kinds, p.ToolName+"/"+p.Kind)
	}
	slices.Sort(kinds)
	if !slices.Equal(kinds, []string{"delete_file/approval", "get_weather/call"}) {
		t.Errorf("pending = %v", kinds)
	}

	serveWeather(t, sys)

	conv, err := sys.Client.Wait(ctx, run.ConversationID)
	if err != nil {
		t.Fatal(err)
	}
	var output string
	if err := json.Unmarshal(conv.Output, &output); err != nil || !strings.Contains(output, "sunny in Paris") {
		t.Errorf("conversation %s: output %s (%v)", conv.Status, conv.Output, err)
	}

	var seen []string
	var denied wire.ReplyApplied
	for ev, err := range sys.Client.Events(ctx, run.ConversationID, "") {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev.Type)
		if ev.Type == wire.EventReplyApplied && ev.ToolCallID == "d1" {
			if err := json.Unmarshal(ev.Data, &denied); err != nil {
				t.Fatal(err)
			}
		}
		if ev.Type == wire.EventRunCompleted {
			break
		}
	}
	for _, want := range []string{wire.EventRunStarted, wire.EventRunPaused, wire.EventReplyApplied, wire.EventToolResult, wire.EventRunCompleted} {
		if !slices.Contains(seen, want) {
			t.Errorf("events %v lack %s", seen, want)
		}
	}
	if denied.Approved == nil || *denied.Approved || denied.ApproverID != "bot" || denied.Message != "not delete_file" {
		t.Errorf("the denial's event = %+v", denied)
	}
}

// The client lists conversations page by page, in the order they were
// created, and deletes a finished one; one under way is refused until it
// is cancelled.
func TestClientListsAndDeletes(t *testing.T) {
	sys := toolgatetest.Start(t, toolgatetest.Options{
		Agent:    []byte(agentYAML),
		AgentDir: fstest.MapFS{"script.yaml": {Data: []byte(scriptYAML)}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), toolgatetest.Timeout)
	defer cancel()
	var ids []string
	for range 3 {
		run, err := sys.Client.Start(ctx, client.StartRequest{Prompt: "Weather in Paris? And delete /etc/passwd."})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sys.Client.Wait(ctx, run.ConversationID, client.StatusPaused); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ConversationID)
	}
	all := func(status string) []string {
		t.Helper()
		var got []string
		for s, err := range sys.Client.Conversations(ctx, status) {
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, s.ConversationID)
		}
		return got
	}
	if got := all(""); !slices.Equal(got, ids) {
		t.Errorf("all: %v; want %v, in the order they were created", got, ids)
	}
	page, err := sys.Client.List(ctx, client.ListOptions{Limit: 2})
	if err != nil || len(page.Conversations) != 2 || page.NextCursor == "" {
		t.Errorf("a page of 2: %+v, %v; want 2 and a cursor", page, err)
	}

	var apiErr *client.APIError
	if err := sys.Client.Delete(ctx, ids[1]); !errors.As(err, &apiErr) || apiErr.Status != http.StatusConflict {
		t.Fatalf("delete of a paused conversation: %v; want a 409", err)
	}
	if err := sys.Client.Cancel(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Client.Wait(ctx, ids[1], client.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	if got := all(client.StatusCancelled); !slices.Equal(got, ids[1:2]) {
		t.Errorf("cancelled: %v; want %v", got, ids[1:2])
	}
	if err := sys.Client.Delete(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	if got := all(""); !slices.Equal(got, []string{ids[0], ids[2]}) {
		t.Errorf("after the delete: %v; want %v", got, []string{ids[0], ids[2]})
	}
	if _, err := sys.Client.Conversation(ctx, ids[1]); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Errorf("read of the deleted conversation: %v; want a 404", err)
	}
}
