package agui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/chat/agui"
	"github.com/toolgate/toolgate/internal/chat/chattest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
)

// pageAgent has a tool of its own, server_tool, and one its frontend
// answers, local_time; page_color is the page's, declared by the frontend
// in RunAgentInput.tools.
const pageAgent = `
name: page
model: {provider: script, script: page.yaml}
tools:
  - name: server_tool
  - {name: local_time, executor: frontend}
`

const pageScript = `
- calls: [{tool: page_color, id: color, args: {color: red}}]
- calls: [{tool: page_color, id: color_again, args: {color: blue}}]
- text: painted twice
`

// Tools the frontend declares in RunAgentInput.tools are offered to the
// model with the thread's runs: the model's call of one ends the run as
// a success naming it (pendingToolCallIds), the frontend answers it with a
// tool message, and the follow-up run, on another replica after the first
// stopped, offers the declared tool still (its second call). Declaring
// one of the agent's executor: frontend tools is no clash. A tool
// message for a call that was never made, a declared tool named as one of
// the agent's and one whose parameters are no object schema are refused.
func TestAGUIDeclaredFrontendTools(t *testing.T) {
	t.Parallel()
	modules := aguiModules(t)
	sys := testkit.Test(t, testkit.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	agentCfg := chattest.Agent(t, pageAgent, map[string]string{"page.yaml": pageScript})
	first := chattest.Orchestrator(ctx, t, sys, agentCfg)
	second, err := sys.Orchestrator(ctx, "orch2", orchestrator.Config{Agent: agentCfg, ReconcileInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	firstH := api.Handler(first, api.Config{Routes: map[string]http.Handler{"POST /v1/agui": agui.Handler(first, agui.Config{})}})
	secondH := api.Handler(second, api.Config{Routes: map[string]http.Handler{"POST /v1/agui": agui.Handler(second, agui.Config{})}})
	// The first input goes to the first replica; the others to the
	// second, once the first has stopped.
	var (
		mu     sync.Mutex
		served int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served++
		n := served
		if n == 2 {
			if err := first.Stop(ctx); err != nil {
				t.Error(err)
			}
		}
		mu.Unlock()
		if n == 1 {
			firstH.ServeHTTP(w, r)
			return
		}
		secondH.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	pageColor := map[string]any{"name": "page_color", "description": "Paint the page in a color.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"color": map[string]any{"type": "string"}}, "required": []any{"color"}}}
	runs := drive(ctx, t, modules, map[string]any{
		"url":     srv.URL + "/v1/agui",
		"threads": map[string]any{"a": map[string]any{"threadId": "painted"}, "b": map[string]any{"threadId": "clash"}},
		"steps": []map[string]any{
			0: {"thread": "a", "user": "Paint the page red", "tools": []any{pageColor, map[string]any{"name": "local_time", "description": "The page's clock."}}},
			// A tool message for a call the server never made.
			1: {"thread": "a", "tool": map[string]any{"toolCallId": "undeclared", "content": "done"}, "restore": true},
			2: {"thread": "a", "tool": map[string]any{"toolCallId": "color", "content": "painted red"}},
			3: {"thread": "a", "tool": map[string]any{"toolCallId": "color_again", "content": "painted blue"}},
			4: {"thread": "b", "user": "Use mine", "tools": []any{map[string]any{"name": "server_tool", "description": "not the agent's"}}, "restore": true},
			5: {"thread": "b", "user": "Use mine", "tools": []any{map[string]any{"name": "page_color", "description": "a string", "parameters": map[string]any{"type": "string"}}}},
		},
	})
	for i, r := range runs {
		t.Logf("step %d: %s %v %s", i, r.types(), r.last(), r.err)
	}
	pending := func(r clientRun) string {
		o, _ := r.last()["outcome"].(map[string]any)
		if o["type"] != "success" {
			return fmt.Sprint(o)
		}
		return fmt.Sprint(o["pendingToolCallIds"])
	}
	if got := pending(runs[0]); got != "[color]" {
		t.Fatalf("the first run waits for %s, want [color]", got)
	}
	var start, args map[string]any
	for _, ev := range runs[0].events {
		switch ev["type"] {
		case "TOOL_CALL_START":
			start = ev
		case "TOOL_CALL_ARGS":
			args = ev
		}
	}
	if start["toolCallName"] != "page_color" || !strings.Contains(fmt.Sprint(args["delta"]), `"red"`) {
		t.Errorf("the call streamed: %v %v", start, args)
	}
	if r := runs[1]; len(r.events) != 1 || r.events[0]["code"] != "history_refused" {
		t.Errorf("a tool message for a call never made: %s %v", r.types(), r.last())
	}
	if got := pending(runs[2]); got != "[color_again]" {
		t.Errorf("the follow-up run waits for %s, want [color_again]", got)
	}
	if o, _ := runs[3].last()["outcome"].(map[string]any); o["type"] != "success" || runs[3].last()["result"] != "painted twice" {
		t.Errorf("the last run: %s %v", runs[3].types(), runs[3].last())
	}
	for i, want := range map[int]string{4: "the agent has a tool of that name", 5: `not "object"`} {
		r := runs[i]
		if len(r.events) != 1 || r.events[0]["code"] != "bad_request" || !strings.Contains(fmt.Sprint(r.events[0]["message"]), want) {
			t.Errorf("step %d: %s %v, want RUN_ERROR bad_request saying %q", i, r.types(), r.last(), want)
		}
	}
	if _, err := second.Conversation(ctx, agui.ConversationID("clash")); err == nil {
		t.Error("a refused thread was started")
	}
	c, err := second.Conversation(ctx, agui.ConversationID("painted"))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(c.FrontendTools)
	if c.Status != conversation.StatusCompleted || len(c.FrontendTools) != 2 || c.FrontendTools[0].Name != "page_color" {
		t.Errorf("conversation %s, frontend tools %s", c.Status, raw)
	}
}
