package aisdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/chat/aisdk"
	"github.com/toolgate/toolgate/internal/chat/chattest"
	"github.com/toolgate/toolgate/internal/testkit"
)

// A response whose connection drops mid-run, inside its first text part,
// while the run waits for a worker: the chat (a transport made with
// resumeStreamIsReplay: false) resumes with the id of the last chunk it
// has as Last-Event-ID and gets the chunks after it, which go on with the
// state it kept: the library's message holds each text, call and result
// exactly once, the text in one part. The next message's request is
// accepted (the history the chat holds is the server's) and streams only
// its own run.
func TestAISDKReconnect(t *testing.T) {
	t.Parallel()
	sys := testkit.Test(t, testkit.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := chattest.Orchestrator(ctx, t, sys, chattest.Agent(t, chattest.SlowAgent, map[string]string{"slow.yaml": chattest.SlowScript}))
	release := chattest.Slow(ctx, t, sys)
	h := aisdk.Handler(o, aisdk.Config{})
	reconnected := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-ID") != "" {
			// The worker's call returns once the client is back.
			release()
		}
		h.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(api.Handler(o, api.Config{Routes: map[string]http.Handler{"POST /v1/ai-sdk/chat": h, "GET /v1/ai-sdk/chat/{id}/stream": reconnected}}))
	t.Cleanup(srv.Close)

	lines := chattest.Node(ctx, t, filepath.Join("testdata", "aisdk-reconnect.mjs"), "", map[string]any{
		"modules": aiModules(t), "url": srv.URL + "/v1/ai-sdk/chat", "id": "dropped", "prompt": "Look it up",
		// start, start-step, text-start, "Let ", "me ", then the drop.
		"cutAfter": 5, "cutText": "Let me ", "next": "Again",
	})
	phases := map[string]stepOut{}
	for _, text := range lines {
		var s struct {
			stepOut
			Phase string `json:"phase"`
		}
		if err := json.Unmarshal(text, &s); err != nil {
			t.Fatalf("client line %q: %v", text, err)
		}
		phases[s.Phase] = s.stepOut
	}
	for _, name := range []string{"cut", "resume", "next"} {
		t.Logf("%s: %s [%s] %s %s", name, phases[name].types(), phases[name].Status, phases[name].Error, phases[name].Thrown)
	}
	cut, resumed, next := phases["cut"], phases["resume"], phases["next"]
	if cut.types() != "start start-step text-start text-delta text-delta" || cut.Error != "network error" {
		t.Fatalf("before the drop: %s (%s)", cut.types(), cut.Error)
	}
	if resumed.Status != "ready" || resumed.Error != "" || len(resumed.Chunks) == 0 || resumed.Chunks[0]["type"] != "start" {
		t.Fatalf("resumed: %s [%s] %s %s", resumed.types(), resumed.Status, resumed.Error, resumed.Thrown)
	}
	// Every chunk once over the two connections, but start.
	count := map[string]int{}
	for _, c := range append(cut.Chunks, resumed.Chunks...) {
		count[fmt.Sprintf("%v %v%v %v", c["type"], c["id"], c["toolCallId"], c["delta"])]++
	}
	for k, n := range count {
		if n != 1 && !strings.HasPrefix(k, "start ") && !strings.HasPrefix(k, "start-step") && !strings.HasPrefix(k, "finish-step") {
			t.Errorf("%s: %d times", k, n)
		}
	}
	var got []string
	for _, m := range resumed.Messages {
		for _, p := range m.Parts {
			got = append(got, fmt.Sprintf("%s:%s:%s%s%s", m.Role, p.Type, p.Text, p.State, p.Output))
		}
	}
	want := []string{
		"user:text:Look it up", "assistant:step-start:", "assistant:text:Let me look into it for youdone", // text and state
		`assistant:tool-slow:output-available"the answer"`, "assistant:step-start:", "assistant:text:found itdone",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the chat's messages after the resume:\n got %q\nwant %q", got, want)
	}
	if next.Status != "ready" || next.Error != "" || next.text() != "again done" {
		t.Errorf("the next message: %s [%s] %s %q", next.types(), next.Status, next.Error, next.text())
	}
	for _, c := range next.Chunks {
		if c["type"] == "tool-output-available" || c["type"] == "tool-input-start" {
			t.Errorf("the next message's response streams a chunk of the first: %v", c)
		}
	}
}
