package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/agent/openai"
	"github.com/toolgate/toolgate/internal/httpretry/httpretrytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fake is an httptest stand-in for a chat completions server. reply is
// called once per HTTP attempt, numbered from 0.
type fake struct {
	srv   *httptest.Server
	reply func(attempt int, w http.ResponseWriter)

	mu       sync.Mutex
	bodies   []map[string]any
	headers  []http.Header
	paths    []string
	attempts int
}

func newFake(t *testing.T, reply func(attempt int, w http.ResponseWriter)) *fake {
	t.Helper()
	f := &fake{reply: reply}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, "body is not JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		n := f.attempts
		f.attempts++
		f.bodies = append(f.bodies, body)
		f.headers = append(f.headers, r.Header.Clone())
		f.paths = append(f.paths, r.URL.Path)
		f.mu.Unlock()
		f.reply(n, w)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) url() string { return f.srv.URL + "/v1" }

func (f *fake) attemptCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attempts
}

func (f *fake) body(t *testing.T, i int) map[string]any {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.bodies) {
		t.Fatalf("server saw %d requests, want at least %d", len(f.bodies), i+1)
	}
	return f.bodies[i]
}

func (f *fake) header(t *testing.T, i int) http.Header {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.headers) {
		t.Fatalf("server saw %d requests, want at least %d", len(f.headers), i+1)
	}
	return f.headers[i]
}

func (f *fake) model(t *testing.T, cfg openai.Config) *openai.Model {
	t.Helper()
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = f.url()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = f.srv.Client()
	}
	m, err := openai.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// writeSSE sends each event as one "data:" line and flushes it, so the
// client reads the chunks as a server would send them.
func writeSSE(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	for _, e := range events {
		_, _ = fmt.Fprintf(w, "data: %s\n\n", e)
		if fl != nil {
			fl.Flush()
		}
	}
}

func completion(model, message, finish, usage string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"` + model +
		`","choices":[{"index":0,"message":` + message + `,"finish_reason":"` + finish + `"}],"usage":` + usage + `}`
}

func chunk(choices string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"served-model","choices":` + choices + `}`
}

func userRequest(text string) agent.ModelRequest {
	return agent.ModelRequest{Messages: []agent.Message{{
		Kind:  agent.KindRequest,
		Parts: []agent.Part{{Kind: agent.PartUserPrompt, Content: text}},
	}}}
}

// jsonOf decodes s the way the fake decodes request bodies, for comparison.
func jsonOf(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad expectation %s: %v", s, err)
	}
	return v
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	bad := 3.0
	tests := []struct {
		name string
		cfg  openai.Config
	}{
		{name: "no model", cfg: openai.Config{}},
		{name: "negative timeout", cfg: openai.Config{Model: "m", Timeout: -time.Second}},
		{name: "negative backoff", cfg: openai.Config{Model: "m", Backoff: -time.Second}},
		{name: "temperature out of range", cfg: openai.Config{Model: "m", Temperature: &bad}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := openai.New(tt.cfg); err == nil {
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}

func TestPlainText(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(_ int, w http.ResponseWriter) {
		writeJSON(w, http.StatusOK, completion("gpt-served-2024",
			`{"role":"assistant","content":"Hello there."}`, "stop",
			`{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}`))
	})
	temp := 0.2
	m := f.model(t, openai.Config{Model: "gpt-x", APIKey: "sk-test", Temperature: &temp})
	if got := m.Name(); got != "gpt-x" {
		t.Errorf("Name() = %q, want gpt-x", got)
	}

	req := userRequest("Hi")
	req.Instructions = "Be brief."
	req.Tools = []agent.ToolDef{{
		Name:        "get_weather",
		Description: "Weather for a city.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"],"additionalProperties":false}`),
	}, {
		Name: "now",
	}}
	got, err := m.Request(t.Context(), req)
	if err != nil {
		t.Fatalf("Request: %v", err)
	}
	want := agent.ModelResponse{
		Parts:     []agent.Part{{Kind: agent.PartText, Content: "Hello there."}},
		ModelName: "gpt-served-2024",
		Usage:     agent.Usage{InputTokens: 12, OutputTokens: 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}

	body := f.body(t, 0)
	wantBody := jsonOf(t, `{
		"model": "gpt-x",
		"temperature": 0.2,
		"messages": [
			{"role": "system", "content": "Be brief."},
			{"role": "user", "content": "Hi"}
		],
		"tools": [
			{"type": "function", "function": {
				"name": "get_weather",
				"description": "Weather for a city.",
				"parameters": {"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"],"additionalProperties":false}
			}},
			{"type": "function", "function": {
				"name": "now",
				"parameters": {"type":"object","properties":{}}
			}}
		]
	}`)
	if diff := cmp.Diff(wantBody, any(body)); diff != "" {
		t.Errorf("request body (-want +got):\n%s", diff)
	}
	if got := f.header(t, 0).Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization = %q, want the configured key", got)
	}
	f.mu.Lock()
	path := f.paths[0]
	f.mu.Unlock()
	if got := path; got != "/v1/chat/completions" {
		t.Errorf("path = %q, want /v1/chat/completions", got)
	}
}

// TestConfigWinsOverEnvironment cannot run in parallel: it sets the OPENAI_*
// variables openai-go would read by itself.
func TestConfigWinsOverEnvironment(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("request went to the server named in OPENAI_BASE_URL")
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(other.Close)
	t.Setenv("OPENAI_BASE_URL", other.URL+"/v1")
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-from-env")
	t.Setenv("OPENAI_PROJECT_ID", "proj-from-env")
	t.Setenv("OPENAI_CUSTOM_HEADERS", "X-From-Env: yes")

	f := newFake(t, func(_ int, w http.ResponseWriter) {
		writeJSON(w, http.StatusOK, completion("m", `{"role":"assistant","content":"ok"}`, "stop", `{}`))
	})
	tests := []struct {
		name     string
		apiKey   string
		wantAuth string
	}{
		{name: "configured key", apiKey: "sk-from-config", wantAuth: "Bearer sk-from-config"},
		{name: "no key", apiKey: "", wantAuth: ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := f.model(t, openai.Config{APIKey: tt.apiKey})
			if _, err := m.Request(t.Context(), userRequest("Hi")); err != nil {
				t.Fatalf("Request: %v", err)
			}
			h := f.header(t, i)
			got := map[string]string{
				"Authorization":       h.Get("Authorization"),
				"OpenAI-Organization": h.Get("OpenAI-Organization"),
				"OpenAI-Project":      h.Get("OpenAI-Project"),
				"X-From-Env":          h.Get("X-From-Env"),
			}
			want := map[string]string{
				"Authorization":       tt.wantAuth,
				"OpenAI-Organization": "",
				"OpenAI-Project":      "",
				"X-From-Env":          "",
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestToolCalls(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		toolCalls string
		want      []agent.Part
	}{
		{
			name: "parallel calls",
			toolCalls: `[
				{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
				{"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}
			]`,
			want: []agent.Part{
				{Kind: agent.PartToolCall, ToolName: "get_weather", ToolCallID: "call_1", Args: json.RawMessage(`{"city":"Paris"}`)},
				{Kind: agent.PartToolCall, ToolName: "get_weather", ToolCallID: "call_2", Args: json.RawMessage(`{"city":"Oslo"}`)},
			},
		},
		{
			name:      "no type field",
			toolCalls: `[{"id":"call_1","function":{"name":"now","arguments":"{}"}}]`,
			want:      []agent.Part{{Kind: agent.PartToolCall, ToolName: "now", ToolCallID: "call_1", Args: json.RawMessage(`{}`)}},
		},
		{
			name:      "empty arguments",
			toolCalls: `[{"id":"call_1","type":"function","function":{"name":"now","arguments":""}}]`,
			want:      []agent.Part{{Kind: agent.PartToolCall, ToolName: "now", ToolCallID: "call_1", Args: json.RawMessage(`{}`)}},
		},
		{
			name:      "invalid JSON arguments",
			toolCalls: `[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": Paris"}}]`,
			want: []agent.Part{{Kind: agent.PartToolCall, ToolName: "get_weather", ToolCallID: "call_1",
				Args: json.RawMessage(`"{\"city\": Paris"`)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, func(_ int, w http.ResponseWriter) {
				writeJSON(w, http.StatusOK, completion("m",
					`{"role":"assistant","content":null,"tool_calls":`+tt.toolCalls+`}`, "tool_calls",
					`{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}`))
			})
			got, err := f.model(t, openai.Config{}).Request(t.Context(), userRequest("weather?"))
			if err != nil {
				t.Fatalf("Request: %v", err)
			}
			if diff := cmp.Diff(tt.want, got.Parts); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(agent.Usage{InputTokens: 5, OutputTokens: 7}, got.Usage); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
			for _, p := range got.Parts {
				if !json.Valid(p.Args) {
					t.Errorf("args %q of %s are not valid JSON", p.Args, p.ToolCallID)
				}
			}
		})
	}
}

func TestHistoryMapping(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(_ int, w http.ResponseWriter) {
		writeJSON(w, http.StatusOK, completion("m", `{"role":"assistant","content":"ok"}`, "stop", `{}`))
	})
	history := []agent.Message{
		{Kind: agent.KindRequest, Parts: []agent.Part{
			{Kind: agent.PartSystemPrompt, Content: "You manage files."},
			{Kind: agent.PartUserPrompt, Content: "Tidy up"},
		}},
		{Kind: agent.KindResponse, Parts: []agent.Part{
			{Kind: agent.PartText, Content: "Looking."},
			{Kind: agent.PartText, Content: "On it."},
			{Kind: agent.PartToolCall, ToolName: "stat", ToolCallID: "a", Args: json.RawMessage(`{"path":"x"}`)},
			{Kind: agent.PartToolCall, ToolName: "delete_file", ToolCallID: "b", Args: json.RawMessage(`{"path":"y"}`)},
			{Kind: agent.PartToolCall, ToolName: "buy", ToolCallID: "c"},
			{Kind: agent.PartToolCall, ToolName: "update", ToolCallID: "d", Args: json.RawMessage(`"{\"path\": x"`)},
		}},
		{Kind: agent.KindRequest, Parts: []agent.Part{
			// The user part comes first here on purpose: it must be sent
			// after the tool replies.
			{Kind: agent.PartUserPrompt, Content: "Also hurry"},
			{Kind: agent.PartToolReturn, ToolName: "stat", ToolCallID: "a", Value: json.RawMessage(`{ "size": 1,
				"kind": "file" }`), Outcome: agent.OutcomeSuccess},
			{Kind: agent.PartToolReturn, ToolName: "delete_file", ToolCallID: "b", Value: json.RawMessage(`"Deleting files is not allowed"`), Outcome: agent.OutcomeDenied},
			{Kind: agent.PartToolReturn, ToolName: "buy", ToolCallID: "c", Value: json.RawMessage(`"The store is closed"`), Outcome: agent.OutcomeFailed},
			{Kind: agent.PartRetryPrompt, ToolName: "update", ToolCallID: "d", Content: "args are not valid JSON"},
			{Kind: agent.PartRetryPrompt, Content: "Answer in English"},
		}},
		{Kind: agent.KindResponse, Parts: []agent.Part{
			{Kind: agent.PartToolCall, ToolName: "delete_file", ToolCallID: "e", Args: json.RawMessage(`{"path":"z"}`)},
			{Kind: agent.PartToolCall, ToolName: "echo", ToolCallID: "f", Args: json.RawMessage(`{}`)},
			{Kind: agent.PartToolCall, ToolName: "noop", ToolCallID: "g", Args: json.RawMessage(`{}`)},
		}},
		{Kind: agent.KindRequest, Parts: []agent.Part{
			{Kind: agent.PartToolReturn, ToolName: "delete_file", ToolCallID: "e", Value: json.RawMessage(`"The tool call was denied."`), Outcome: agent.OutcomeDenied},
			{Kind: agent.PartToolReturn, ToolName: "echo", ToolCallID: "f", Value: json.RawMessage(`"plain text"`), Outcome: agent.OutcomeSuccess},
			{Kind: agent.PartToolReturn, ToolName: "noop", ToolCallID: "g"},
		}},
		{Kind: agent.KindResponse, Parts: []agent.Part{{Kind: agent.PartText, Content: "Done."}}},
		{Kind: agent.KindRequest, Parts: []agent.Part{{Kind: agent.PartUserPrompt, Content: "Thanks"}}},
	}
	_, err := f.model(t, openai.Config{}).Request(t.Context(), agent.ModelRequest{
		Instructions: "Be careful.",
		Messages:     history,
	})
	if err != nil {
		t.Fatalf("Request: %v", err)
	}
	want := jsonOf(t, `[
		{"role": "system", "content": "Be careful."},
		{"role": "system", "content": "You manage files."},
		{"role": "user", "content": "Tidy up"},
		{"role": "assistant", "content": "Looking.\n\nOn it.", "tool_calls": [
			{"id": "a", "type": "function", "function": {"name": "stat", "arguments": "{\"path\":\"x\"}"}},
			{"id": "b", "type": "function", "function": {"name": "delete_file", "arguments": "{\"path\":\"y\"}"}},
			{"id": "c", "type": "function", "function": {"name": "buy", "arguments": "{}"}},
			{"id": "d", "type": "function", "function": {"name": "update", "arguments": "{\"path\": x"}}
		]},
		{"role": "tool", "tool_call_id": "a", "content": "{\"size\":1,\"kind\":\"file\"}"},
		{"role": "tool", "tool_call_id": "b", "content": "The tool call was denied: Deleting files is not allowed"},
		{"role": "tool", "tool_call_id": "c", "content": "The tool call failed: The store is closed"},
		{"role": "tool", "tool_call_id": "d", "content": "args are not valid JSON\n\nFix the errors and try again."},
		{"role": "user", "content": "Also hurry"},
		{"role": "user", "content": "Answer in English\n\nFix the errors and try again."},
		{"role": "assistant", "tool_calls": [
			{"id": "e", "type": "function", "function": {"name": "delete_file", "arguments": "{\"path\":\"z\"}"}},
			{"id": "f", "type": "function", "function": {"name": "echo", "arguments": "{}"}},
			{"id": "g", "type": "function", "function": {"name": "noop", "arguments": "{}"}}
		]},
		{"role": "tool", "tool_call_id": "e", "content": "The tool call was denied."},
		{"role": "tool", "tool_call_id": "f", "content": "plain text"},
		{"role": "tool", "tool_call_id": "g", "content": "null"},
		{"role": "assistant", "content": "Done."},
		{"role": "user", "content": "Thanks"}
	]`)
	if diff := cmp.Diff(want, f.body(t, 0)["messages"]); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
}

func TestHistoryRejectsUnknownParts(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(_ int, w http.ResponseWriter) {
		writeJSON(w, http.StatusOK, completion("m", `{"role":"assistant","content":"ok"}`, "stop", `{}`))
	})
	m := f.model(t, openai.Config{})
	_, err := m.Request(t.Context(), agent.ModelRequest{Messages: []agent.Message{
		{Kind: agent.KindRequest, Parts: []agent.Part{{Kind: agent.PartToolCall, ToolName: "x"}}},
	}})
	if err == nil {
		t.Fatal("a tool-call part in a request was accepted")
	}
	if n := f.attemptCount(); n != 0 {
		t.Errorf("server saw %d requests for an invalid history, want 0", n)
	}
}

func TestStreamText(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(_ int, w http.ResponseWriter) {
		writeSSE(w,
			chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`),
			chunk(`[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]`),
			chunk(`[{"index":0,"delta":{"content":"lo, "},"finish_reason":null}]`),
			chunk(`[{"index":0,"delta":{"content":"world"},"finish_reason":null}]`),
			chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`),
			`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"served-model","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}`,
			`[DONE]`,
		)
	})
	var deltas []string
	req := userRequest("Hi")
	req.StreamFunc = func(d string) { deltas = append(deltas, d) }
	got, err := f.model(t, openai.Config{Stream: true}).Request(t.Context(), req)
	if err != nil {
		t.Fatalf("Request: %v", err)
	}
	if diff := cmp.Diff([]string{"Hel", "lo, ", "world"}, deltas); diff != "" {
		t.Errorf("deltas (-want +got):\n%s", diff)
	}
	want := agent.ModelResponse{
		Parts:     []agent.Part{{Kind: agent.PartText, Content: "Hello, world"}},
		ModelName: "served-model",
		Usage:     agent.Usage{InputTokens: 9, OutputTokens: 4},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	body := f.body(t, 0)
	gotStream := map[string]any{"stream": body["stream"], "stream_options": body["stream_options"]}
	wantStream := jsonOf(t, `{"stream": true, "stream_options": {"include_usage": true}}`)
	if diff := cmp.Diff(wantStream, any(gotStream)); diff != "" {
		t.Errorf("stream fields (-want +got):\n%s", diff)
	}
}

func TestStreamToolCalls(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		events []string
		want   []agent.Part
	}{
		{
			name: "interleaved fragments",
			events: []string{
				chunk(`[{"index":0,"delta":{"role":"assistant","content":"Checking."},"finish_reason":null}]`),
				chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}]`),
				chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"ci"}}]},"finish_reason":null}]`),
				chunk(`[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":"}}]},"finish_reason":null}]`),
				chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ty\":\"Paris\"}"}}]},"finish_reason":null}]`),
				chunk(`[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"Oslo\"}"}}]},"finish_reason":null}]`),
				chunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`),
				`[DONE]`,
			},
			want: []agent.Part{
				{Kind: agent.PartText, Content: "Checking."},
				{Kind: agent.PartToolCall, ToolName: "get_weather", ToolCallID: "call_1", Args: json.RawMessage(`{"city":"Paris"}`)},
				{Kind: agent.PartToolCall, ToolName: "get_weather", ToolCallID: "call_2", Args: json.RawMessage(`{"city":"Oslo"}`)},
			},
		},
		{
			name: "no type field",
			events: []string{
				chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"now","arguments":""}}]},"finish_reason":null}]`),
				chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":"tool_calls"}]`),
				`[DONE]`,
			},
			want: []agent.Part{{Kind: agent.PartToolCall, ToolName: "now", ToolCallID: "call_1", Args: json.RawMessage(`{}`)}},
		},
		{
			name: "whole calls sharing an index",
			events: []string{
				chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"a","arguments":"{\"n\":1}"}}]},"finish_reason":null}]`),
				chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_2","type":"function","function":{"name":"b","arguments":"{\"n\":2}"}}]},"finish_reason":null}]`),
				chunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`),
			},
			want: []agent.Part{
				{Kind: agent.PartToolCall, ToolName: "a", ToolCallID: "call_1", Args: json.RawMessage(`{"n":1}`)},
				{Kind: agent.PartToolCall, ToolName: "b", ToolCallID: "call_2", Args: json.RawMessage(`{"n":2}`)},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, func(_ int, w http.ResponseWriter) { writeSSE(w, tt.events...) })
			got, err := f.model(t, openai.Config{Stream: true}).Request(t.Context(), userRequest("weather?"))
			if err != nil {
				t.Fatalf("Request: %v", err)
			}
			if diff := cmp.Diff(tt.want, got.Parts); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStreamErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		events   []string
		wantIs   error
		wantText string
	}{
		{
			name: "ends without finish reason",
			events: []string{
				chunk(`[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]`),
				chunk(`[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"now","arguments":"{"}}]},"finish_reason":null}]`),
			},
			wantIs: openai.ErrTruncated,
		},
		{
			name: "done without finish reason",
			events: []string{
				chunk(`[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]`),
				`[DONE]`,
			},
			wantIs: openai.ErrTruncated,
		},
		{
			name: "error event",
			events: []string{
				chunk(`[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]`),
				`{"error":{"message":"The server is overloaded","type":"server_error","param":null,"code":null}}`,
			},
			wantText: "The server is overloaded",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, func(_ int, w http.ResponseWriter) { writeSSE(w, tt.events...) })
			_, err := f.model(t, openai.Config{Stream: true}).Request(t.Context(), userRequest("Hi"))
			if err == nil {
				t.Fatal("Request succeeded on a broken stream")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v is not %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %q does not contain %q", err, tt.wantText)
			}
			if strings.Contains(err.Error(), `"type"`) {
				t.Errorf("error %q carries the raw provider body", err)
			}
		})
	}
}

func TestUnauthorizedNotRetried(t *testing.T) {
	t.Parallel()
	const key = "sk-secret-key-1234567890"
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			t.Parallel()
			f := newFake(t, func(_ int, w http.ResponseWriter) {
				writeJSON(w, http.StatusUnauthorized, `{"error":{"message":"Incorrect API key provided: `+key+
					`. You can find your API key at the dashboard.","type":"invalid_request_error","param":null,"code":"invalid_api_key"},"debug":"`+
					strings.Repeat("x", 2000)+`"}`)
			})
			_, err := f.model(t, openai.Config{APIKey: key, Stream: stream}).Request(t.Context(), userRequest("Hi"))
			if err == nil {
				t.Fatal("Request succeeded on a 401")
			}
			if !errors.Is(err, openai.ErrUnauthorized) {
				t.Errorf("error %v is not ErrUnauthorized", err)
			}
			var se *openai.StatusError
			if !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized {
				t.Errorf("error %v is not a StatusError with 401", err)
			}
			if n := f.attemptCount(); n != 1 {
				t.Errorf("server saw %d attempts, want 1", n)
			}
			msg := err.Error()
			if strings.Contains(msg, key) {
				t.Errorf("error %q contains the API key", msg)
			}
			if strings.Contains(msg, "xxxxxxxxxx") || strings.Contains(msg, "invalid_request_error") {
				t.Errorf("error %q carries the provider body", msg)
			}
			if !strings.Contains(msg, "check the API key") || !strings.Contains(msg, "401") {
				t.Errorf("error %q does not say what is wrong", msg)
			}
		})
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	ok := completion("m", `{"role":"assistant","content":"finally"}`, "stop", `{}`)
	tests := []struct {
		name         string
		maxRetries   int
		stream       bool
		failures     int
		status       int
		wantAttempts int
		wantErr      bool
	}{
		{name: "429 then success", failures: 2, status: http.StatusTooManyRequests, wantAttempts: 3},
		{name: "503 then success", failures: 1, status: http.StatusServiceUnavailable, wantAttempts: 2},
		{name: "429 then success streaming", failures: 1, status: http.StatusTooManyRequests, stream: true, wantAttempts: 2},
		{name: "retries exhausted", failures: 10, status: http.StatusTooManyRequests, maxRetries: 3, wantAttempts: 4, wantErr: true},
		{name: "retries disabled", failures: 10, status: http.StatusInternalServerError, maxRetries: -1, wantAttempts: 1, wantErr: true},
		{name: "400 not retried", failures: 10, status: http.StatusBadRequest, wantAttempts: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, func(attempt int, w http.ResponseWriter) {
				if attempt < tt.failures {
					// Retry-After: 0 keeps the test fast while proving the
					// header is honoured (the default backoff is 1s and up).
					w.Header().Set("Retry-After", "0")
					writeJSON(w, tt.status, `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`)
					return
				}
				if tt.stream {
					writeSSE(w, chunk(`[{"index":0,"delta":{"content":"finally"},"finish_reason":"stop"}]`), `[DONE]`)
					return
				}
				writeJSON(w, http.StatusOK, ok)
			})
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			got, err := f.model(t, openai.Config{MaxRetries: tt.maxRetries, Stream: tt.stream}).Request(ctx, userRequest("Hi"))
			if n := f.attemptCount(); n != tt.wantAttempts {
				t.Errorf("server saw %d attempts, want %d", n, tt.wantAttempts)
			}
			if tt.wantErr {
				var se *openai.StatusError
				if !errors.As(err, &se) {
					t.Fatalf("error %v is not a StatusError", err)
				}
				if diff := cmp.Diff(&openai.StatusError{StatusCode: tt.status, Message: "slow down"}, se); diff != "" {
					t.Errorf("status error (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Request: %v", err)
			}
			if diff := cmp.Diff([]agent.Part{{Kind: agent.PartText, Content: "finally"}}, got.Parts); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProviderErrorShapes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want string
	}{
		{name: "openai", body: `{"error":{"message":"model not found","type":"invalid_request_error"}}`, want: "model not found"},
		{name: "ollama", body: `{"error":"model \"qwen\" not found, try pulling it first"}`, want: `model "qwen" not found, try pulling it first`},
		{name: "fastapi detail", body: `{"detail":"Not Found"}`, want: "Not Found"},
		{name: "plain text", body: "no such model\n", want: "no such model"},
		{name: "long text", body: strings.Repeat("a", 5000), want: strings.Repeat("a", 300) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, func(_ int, w http.ResponseWriter) {
				writeJSON(w, http.StatusNotFound, tt.body)
			})
			_, err := f.model(t, openai.Config{}).Request(t.Context(), userRequest("Hi"))
			var se *openai.StatusError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a StatusError", err)
			}
			if diff := cmp.Diff(&openai.StatusError{StatusCode: http.StatusNotFound, Message: tt.want}, se); diff != "" {
				t.Errorf("status error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestContextCancelled(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	f := newFake(t, func(_ int, w http.ResponseWriter) {
		writeSSE(w, chunk(`[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]`))
		<-release
	})
	defer close(release)
	ctx, cancel := context.WithCancel(t.Context())
	req := userRequest("Hi")
	req.StreamFunc = func(string) { cancel() }
	_, err := f.model(t, openai.Config{Stream: true}).Request(ctx, req)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v is not context.Canceled", err)
	}
}

// The wait before each retry is the server's Retry-After (seconds or an
// HTTP-date) or Retry-After-Ms when it gives one, else the configured
// backoff doubled at each retry, less up to a quarter of jitter, capped;
// a server asking for more than 2 minutes is not retried.
func TestRetryWaits(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		stream  bool
		cfg     openai.Config
		headers []map[string]string // per failed attempt; then 200
		status  int
		// want is each wait's range [lo, hi]
		want         [][2]time.Duration
		wantAttempts int
		wantErr      string
	}{
		{
			name:   "retry-after seconds then date",
			status: http.StatusServiceUnavailable,
			headers: []map[string]string{
				{"Retry-After": "7"},
				// 7s later by the clock the waits move: 90s from then.
				{"Retry-After": start.Add(97 * time.Second).Format(http.TimeFormat)},
			},
			want:         [][2]time.Duration{{7 * time.Second, 7 * time.Second}, {90 * time.Second, 90 * time.Second}},
			wantAttempts: 3,
		},
		{
			name:         "retry-after streaming",
			stream:       true,
			status:       http.StatusTooManyRequests,
			headers:      []map[string]string{{"Retry-After": "3"}},
			want:         [][2]time.Duration{{3 * time.Second, 3 * time.Second}},
			wantAttempts: 2,
		},
		{
			name:         "retry-after-ms wins",
			status:       http.StatusTooManyRequests,
			headers:      []map[string]string{{"Retry-After-Ms": "1500", "Retry-After": "2"}},
			want:         [][2]time.Duration{{1500 * time.Millisecond, 1500 * time.Millisecond}},
			wantAttempts: 2,
		},
		{
			name:         "date in the past",
			status:       http.StatusBadGateway,
			headers:      []map[string]string{{"Retry-After": start.Add(-time.Hour).Format(http.TimeFormat)}},
			want:         [][2]time.Duration{{0, 0}},
			wantAttempts: 2,
		},
		{
			name:    "backoff doubles with jitter up to its cap",
			cfg:     openai.Config{Backoff: 10 * time.Second, MaxRetries: 4},
			status:  http.StatusInternalServerError,
			headers: []map[string]string{{}, {"Retry-After": "soon"}, {}, {}},
			want: [][2]time.Duration{
				{7500 * time.Millisecond, 10 * time.Second},
				{15 * time.Second, 20 * time.Second},
				{22500 * time.Millisecond, 30 * time.Second},
				{22500 * time.Millisecond, 30 * time.Second},
			},
			wantAttempts: 5,
		},
		{
			name:         "too long a wait is not retried",
			status:       http.StatusTooManyRequests,
			headers:      []map[string]string{{"Retry-After": "3600"}},
			wantAttempts: 1,
			wantErr:      "not retried: the server asks to wait more than 2m0s",
		},
		{
			name:         "retries exhausted",
			cfg:          openai.Config{MaxRetries: 2},
			status:       http.StatusServiceUnavailable,
			headers:      []map[string]string{{"Retry-After": "1"}, {"Retry-After": "1"}, {"Retry-After": "1"}},
			want:         [][2]time.Duration{{time.Second, time.Second}, {time.Second, time.Second}},
			wantAttempts: 3,
			wantErr:      "status 503",
		},
		{
			name:         "x-should-retry false",
			status:       http.StatusServiceUnavailable,
			headers:      []map[string]string{{"X-Should-Retry": "false"}},
			wantAttempts: 1,
			wantErr:      "status 503",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, func(attempt int, w http.ResponseWriter) {
				if attempt < len(tt.headers) {
					for k, v := range tt.headers[attempt] {
						w.Header().Set(k, v)
					}
					writeJSON(w, tt.status, `{"error":{"message":"overloaded"}}`)
					return
				}
				if tt.stream {
					writeSSE(w, chunk(`[{"index":0,"delta":{"content":"finally"},"finish_reason":"stop"}]`), `[DONE]`)
					return
				}
				writeJSON(w, http.StatusOK, completion("m", `{"role":"assistant","content":"finally"}`, "stop", `{}`))
			})
			cfg := tt.cfg
			cfg.Stream = tt.stream
			m := f.model(t, cfg)
			w := httpretrytest.New(start)
			openai.SetClock(m, w.Clock, w.Sleep)
			got, err := m.Request(t.Context(), userRequest("Hi"))
			if n := f.attemptCount(); n != tt.wantAttempts {
				t.Errorf("server saw %d attempts, want %d", n, tt.wantAttempts)
			}
			waited := w.All()
			if len(waited) != len(tt.want) {
				t.Fatalf("waits %v, want %d of them", waited, len(tt.want))
			}
			for i, d := range waited {
				if d < tt.want[i][0] || d > tt.want[i][1] {
					t.Errorf("wait %d = %s, want within %v", i, d, tt.want[i])
				}
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Request: %v", err)
			}
			if diff := cmp.Diff([]agent.Part{{Kind: agent.PartText, Content: "finally"}}, got.Parts); diff != "" {
				t.Errorf("parts (-want +got):\n%s", diff)
			}
		})
	}
}

// A retry waits on the request's context: cancelled while waiting, the
// request ends at once with the cancellation, without another attempt.
func TestRetryWaitCancelled(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(_ int, w http.ResponseWriter) {
		w.Header().Set("Retry-After", "100")
		writeJSON(w, http.StatusServiceUnavailable, `{"error":{"message":"overloaded"}}`)
	})
	ctx, cancel := context.WithCancel(t.Context())
	m := f.model(t, openai.Config{})
	openai.SetClock(m, time.Now, func(ctx context.Context, d time.Duration) error {
		if d != 100*time.Second {
			t.Errorf("wait %s, want 100s", d)
		}
		cancel()
		<-ctx.Done()
		return ctx.Err()
	})
	_, err := m.Request(ctx, userRequest("Hi"))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v is not context.Canceled", err)
	}
	if n := f.attemptCount(); n != 1 {
		t.Errorf("server saw %d attempts, want 1", n)
	}
}
