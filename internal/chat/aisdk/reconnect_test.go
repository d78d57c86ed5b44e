package aisdk_test

import (
	"bufio"
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

// chunk is a chunk of a raw UI message stream with its SSE id.
type chunk struct {
	id string
	c  map[string]any
}

func describeChunks(cs []chunk) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "%v %v%v %v [%s]\n", c.c["type"], c.c["toolCallId"], c.c["id"], c.c["delta"], c.id)
	}
	return b.String()
}

// rawStream sends req and returns the chunks of the answer with their ids.
func rawStream(t *testing.T, req *http.Request) (int, []chunk) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var (
		out []chunk
		id  string
	)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			id = v
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && data != "[DONE]" {
			var c map[string]any
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				t.Fatal(err)
			}
			out = append(out, chunk{id: id, c: c})
		}
		if line == "" {
			id = ""
		}
	}
	return resp.StatusCode, out
}

// A reconnect with the id of any chunk of a response gets the rest of that
// response under the same ids, after a start chunk under the id it resumes
// from: for a response to a new user message, to a request of answers (the
// message it goes on with), and for a replay. A malformed Last-Event-ID, or
// one of no response of the chat, is a 400.
func TestAISDKReconnectAtEveryChunk(t *testing.T) {
	t.Parallel()
	sys := testkit.Test(t, testkit.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := chattest.Orchestrator(ctx, t, sys, chattest.Agent(t, chattest.FilesAgent, map[string]string{"script.yaml": chattest.FilesScript}))
	chattest.Files(ctx, t, sys, nil, "update_file", "delete_file")
	h := aisdk.Handler(o, aisdk.Config{})
	srv := httptest.NewServer(api.Handler(o, api.Config{Routes: map[string]http.Handler{"POST /v1/ai-sdk/chat": h, "GET /v1/ai-sdk/chat/{id}/stream": h}}))
	t.Cleanup(srv.Close)
	post := func(body any) []chunk {
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/ai-sdk/chat", strings.NewReader(string(raw)))
		req.Header.Set("Content-Type", "application/json")
		status, cs := rawStream(t, req)
		if status != http.StatusOK || len(cs) < 3 {
			t.Fatalf("%d\n%s", status, describeChunks(cs))
		}
		return cs
	}
	reconnect := func(lastID string) (int, []chunk) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/ai-sdk/chat/again/stream", nil)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		return rawStream(t, req)
	}
	everyChunk := func(name string, first []chunk) {
		for i := range first[:len(first)-1] {
			status, again := reconnect(first[i].id)
			want := append([]chunk{{id: first[i].id, c: map[string]any{"type": "start"}}}, first[i+1:]...)
			if status != http.StatusOK || describeChunks(again) != describeChunks(want) {
				t.Errorf("%s, reconnect after chunk %d:\n got %s\nwant %s", name, i, describeChunks(again), describeChunks(want))
			}
		}
	}
	user := map[string]any{"id": "u1", "role": "user", "parts": []any{map[string]any{"type": "text", "text": "go"}}}
	first := post(map[string]any{"id": "again", "messages": []any{user}})
	everyChunk("a new message", first)
	_, replay := reconnect("")
	everyChunk("a replay", replay)

	approvals := map[string]string{}
	for _, c := range first {
		if c.c["type"] == "tool-approval-request" {
			approvals[fmt.Sprint(c.c["toolCallId"])] = fmt.Sprint(c.c["approvalId"])
		}
	}
	assistant := map[string]any{"id": "a1", "role": "assistant", "parts": []any{
		map[string]any{"type": "step-start"},
		map[string]any{"type": "tool-update_file", "toolCallId": "upd", "state": "approval-responded",
			"input": map[string]any{"path": "a.txt", "content": "from the model"}, "approval": map[string]any{"id": approvals["upd"], "approved": true}},
		map[string]any{"type": "tool-delete_file", "toolCallId": "del", "state": "approval-responded",
			"input": map[string]any{"path": "b.txt"}, "approval": map[string]any{"id": approvals["del"], "approved": false, "reason": "no"}},
		map[string]any{"type": "tool-local_time", "toolCallId": "time", "state": "output-available", "input": map[string]any{}, "output": "12:00"},
	}}
	answered := post(map[string]any{"id": "again", "messages": []any{user, assistant}})
	if last := answered[len(answered)-1].c; last["type"] != "finish" || last["finishReason"] != "stop" {
		t.Fatalf("the answers' response:\n%s", describeChunks(answered))
	}
	everyChunk("a message gone on with", answered)

	if status, _ := reconnect("x1.2"); status != http.StatusBadRequest {
		t.Errorf("a malformed Last-Event-ID: %d", status)
	}
	if status, _ := reconnect("n0.9.0.0.0"); status != http.StatusBadRequest {
		t.Errorf("a Last-Event-ID of no response of the chat: %d", status)
	}
}
