package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
)

func must(t *testing.T) func(agent.Tool, error) agent.Tool {
	return func(tool agent.Tool, err error) agent.Tool {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return tool
	}
}

func mustAgent(t *testing.T, cfg agent.Config) *agent.Agent {
	t.Helper()
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func calls(cs ...agent.ScriptCall) agent.ScriptResponse { return agent.ScriptResponse{Calls: cs} }

func call(tool, id, args string) agent.ScriptCall {
	return agent.ScriptCall{Tool: tool, ID: id, Args: json.RawMessage(args)}
}

// Bodies of one response run concurrently: each waits until the other has
// started, which only ends if both run at the same time.
func TestToolBodiesRunConcurrently(t *testing.T) {
	t.Parallel()
	var started sync.WaitGroup
	started.Add(2)
	all := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	body := func(ctx *agent.RunContext, _ struct{}) (string, error) {
		started.Done()
		select {
		case <-all:
			return ctx.ToolCallID, nil
		case <-time.After(10 * time.Second):
			return "", errors.New("the other body did not start")
		}
	}
	a := mustAgent(t, agent.Config{
		Model: agent.NewScriptModel("", []agent.ScriptResponse{
			calls(call("one", "c1", `{}`), call("two", "c2", `{}`)),
			{Text: "done"},
		}),
		Tools: []agent.Tool{
			must(t)(agent.NewTool("one", "", body)),
			must(t)(agent.NewTool("two", "", body)),
		},
	})
	res, err := a.Run(context.Background(), agent.RunInput{Prompt: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Usage; got.ToolCalls != 2 || got.Requests != 2 {
		t.Errorf("usage = %+v, want 2 tool calls and 2 requests", got)
	}
}

type weatherArgs struct {
	City string `json:"city" jsonschema:"description=City name"`
	Days int    `json:"days,omitempty" jsonschema:"minimum=1"`
}

func TestTypedTool(t *testing.T) {
	t.Parallel()
	var seen []weatherArgs
	var mu sync.Mutex
	tool := must(t)(agent.NewTool("weather", "Forecast",
		func(ctx *agent.RunContext, a weatherArgs) (agent.ToolReturn, error) {
			mu.Lock()
			seen = append(seen, a)
			mu.Unlock()
			return agent.ToolReturn{Value: map[string]any{"city": a.City}, Content: "sunny", Metadata: map[string]int{"cost": 1}}, nil
		},
		agent.WithValidator(func(ctx *agent.RunContext, a weatherArgs) error {
			if a.City == "Atlantis" {
				return agent.ModelRetry("no such city")
			}
			return nil
		}),
		agent.WithRetries(2)))

	var schema map[string]any
	if err := json.Unmarshal(tool.Def().Parameters, &schema); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{"city"}, schema["required"]); diff != "" {
		t.Errorf("required (-want +got):\n%s", diff)
	}
	if _, ok := schema["$schema"]; ok {
		t.Errorf("schema keeps $schema: %s", tool.Def().Parameters)
	}

	a := mustAgent(t, agent.Config{
		Model: agent.NewScriptModel("", []agent.ScriptResponse{
			calls(call("weather", "w1", `{"city":7}`), call("weather", "w2", `{"city":"Atlantis"}`), call("weather", "w3", `{"city":"Paris","days":2}`)),
			{Text: "done"},
		}),
		Tools: []agent.Tool{tool},
	})
	res, err := a.Run(context.Background(), agent.RunInput{Prompt: "weather?"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]weatherArgs{{City: "Paris", Days: 2}}, seen); diff != "" {
		t.Errorf("bodies saw (-want +got):\n%s", diff)
	}
	req := res.NewMessages[2]
	var kinds []string
	for _, p := range req.Parts {
		kinds = append(kinds, string(p.Kind)+":"+p.ToolCallID)
	}
	want := []string{"retry-prompt:w1", "retry-prompt:w2", "tool-return:w3", "user-prompt:"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("request parts (-want +got):\n%s", diff)
	}
	if !strings.Contains(req.Parts[0].Content, "city") {
		t.Errorf("retry for invalid args does not name the field: %q", req.Parts[0].Content)
	}
	if got := string(req.Parts[2].Metadata); got != `{"cost":1}` {
		t.Errorf("metadata = %s", got)
	}
	if req.Parts[3].Content != "sunny" {
		t.Errorf("content part = %q", req.Parts[3].Content)
	}
}

func TestToolConstructionErrors(t *testing.T) {
	t.Parallel()
	body := func(ctx *agent.RunContext, a weatherArgs) (string, error) { return "", nil }
	tests := []struct {
		name string
		err  error
	}{
		{"validator of another type", func() error {
			_, err := agent.NewTool("x", "", body, agent.WithValidator(func(*agent.RunContext, string) error { return nil }))
			return err
		}()},
		{"args not a struct", func() error {
			_, err := agent.NewTool("x", "", func(*agent.RunContext, int) (string, error) { return "", nil })
			return err
		}()},
		{"negative retries", func() error { _, err := agent.NewTool("x", "", body, agent.WithRetries(-1)); return err }()},
		{"schema not an object", func() error {
			_, err := agent.NewRawTool(agent.ToolDef{Name: "x", Parameters: json.RawMessage(`{"type":"string"}`)},
				func(*agent.RunContext, json.RawMessage) (any, error) { return nil, nil })
			return err
		}()},
		{"external ref", func() error {
			_, err := agent.ExternalToolset(agent.ToolDef{Name: "x", Parameters: json.RawMessage(`{"$ref":"file:///etc/passwd"}`)})
			return err
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil {
				t.Error("no error")
			}
		})
	}
	tool := must(t)(agent.NewTool("x", "", body))
	if _, err := agent.New(agent.Config{Model: agent.NewTestModel(), Tools: []agent.Tool{tool, tool}}); err == nil {
		t.Error("New accepted a tool declared twice")
	}
	if _, err := agent.New(agent.Config{}); err == nil {
		t.Error("New accepted a config without a model")
	}
}

// ApprovalToolset asks its predicate per call (D4); approved calls run with
// ToolCallApproved and the results' metadata (D23).
func TestApprovalToolset(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var ran []string
	body := func(ctx *agent.RunContext, a struct {
		X int `json:"x"`
	}) (int, error) {
		mu.Lock()
		ran = append(ran, ctx.ToolCallID+":"+map[bool]string{true: "approved", false: "plain"}[ctx.ToolCallApproved]+":"+string(ctx.ToolCallMetadata))
		mu.Unlock()
		return a.X, nil
	}
	ts := agent.ApprovalToolset(agent.NewToolset(
		must(t)(agent.NewTool("foo", "", body)),
		must(t)(agent.NewTool("bar", "", body)),
	), func(ctx *agent.RunContext, tool agent.ToolDef, args json.RawMessage) (bool, error) {
		return tool.Name == "foo", nil
	})
	a := mustAgent(t, agent.Config{
		Model: agent.NewScriptModel("", []agent.ScriptResponse{
			calls(call("foo", "f1", `{"x":1}`), call("bar", "b1", `{"x":2}`)),
			{Text: "done"},
		}),
		Toolsets:      []agent.Toolset{ts},
		AllowDeferred: true,
	})
	ctx := context.Background()
	res, err := a.Run(ctx, agent.RunInput{Prompt: "go"})
	if err != nil {
		t.Fatal(err)
	}
	if got := callIDs(res.Deferred.Approvals); !cmp.Equal(got, []string{"f1"}) {
		t.Fatalf("approvals = %v", got)
	}
	results, err := res.Deferred.BuildResults(nil, nil, map[string]json.RawMessage{"f1": json.RawMessage(`{"by":"bob"}`)}, true)
	if err != nil {
		t.Fatal(err)
	}
	// Without the stored Requests the predicate categorises the call (D12).
	res, err = a.Run(ctx, agent.RunInput{History: res.AllMessages, Results: results})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"b1:plain:", `f1:approved:{"by":"bob"}`}, ran); diff != "" {
		t.Errorf("executions (-want +got):\n%s", diff)
	}
	if res.Output != "done" {
		t.Errorf("output = %q", res.Output)
	}
}

func TestHandlerErrors(t *testing.T) {
	t.Parallel()
	tools := func() []agent.Tool {
		return []agent.Tool{
			must(t)(agent.NewTool("ask", "", func(*agent.RunContext, struct{}) (string, error) { return "ok", nil }, agent.RequiresApproval())),
			must(t)(agent.NewTool("work", "", func(*agent.RunContext, struct{}) (string, error) { return "", deferred.CallDeferred(nil) })),
		}
	}
	tests := []struct {
		name    string
		handler agent.HandlerFunc
		want    string
	}{
		{"decision for an external call", func(ctx *agent.RunContext, r *deferred.Requests) (*deferred.Results, error) {
			return &deferred.Results{Approvals: map[string]deferred.Decision{"w1": deferred.Approved{}}}, nil
		}, "w1"},
		{"result for an approval call", func(ctx *agent.RunContext, r *deferred.Requests) (*deferred.Results, error) {
			return &deferred.Results{Calls: map[string]deferred.Result{"a1": deferred.Value{Value: json.RawMessage(`1`)}}}, nil
		}, "a1"},
		{"nil decision", func(ctx *agent.RunContext, r *deferred.Requests) (*deferred.Results, error) {
			return &deferred.Results{Approvals: map[string]deferred.Decision{"a1": nil}}, nil
		}, "a1"},
		{"handler error", func(ctx *agent.RunContext, r *deferred.Requests) (*deferred.Results, error) {
			return nil, errors.New("approver unreachable")
		}, "approver unreachable"},
		{"handler panic", func(ctx *agent.RunContext, r *deferred.Requests) (*deferred.Results, error) {
			panic("boom")
		}, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := mustAgent(t, agent.Config{
				Model:    agent.NewScriptModel("", []agent.ScriptResponse{calls(call("ask", "a1", `{}`), call("work", "w1", `{}`))}),
				Tools:    tools(),
				Handlers: []agent.Handler{tt.handler},
			})
			_, err := a.Run(context.Background(), agent.RunInput{Prompt: "go"})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestRunLimitsAndErrors(t *testing.T) {
	t.Parallel()
	loop := agent.FunctionModel("loop", func(ctx context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
		return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartToolCall, ToolName: "nope", Args: json.RawMessage(`{}`)}}}, nil
	})
	a := mustAgent(t, agent.Config{Model: loop, MaxModelRequests: 3})
	if _, err := a.Run(context.Background(), agent.RunInput{Prompt: "go"}); err == nil || !strings.Contains(err.Error(), "limit of 3") {
		t.Errorf("error = %v, want the request limit", err)
	}
	failing := agent.FunctionModel("down", func(ctx context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
		return agent.ModelResponse{}, errors.New("503")
	})
	a = mustAgent(t, agent.Config{Model: failing})
	if _, err := a.Run(context.Background(), agent.RunInput{Prompt: "go"}); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("error = %v, want the model's", err)
	}
	if _, err := a.Run(context.Background(), agent.RunInput{}); err == nil {
		t.Error("a run without prompt or history succeeded")
	}
}

// Every message is stamped, and history survives JSON and msgpack.
func TestMessagesRoundTrip(t *testing.T) {
	t.Parallel()
	ids := []string{"conv-1", "run-1"} // the conversation id is made first
	var mu sync.Mutex
	clock := time.Date(2025, 11, 24, 10, 0, 0, 123456789, time.UTC)
	a := mustAgent(t, agent.Config{
		Model: agent.NewScriptModel("", []agent.ScriptResponse{
			calls(call("echo", "e1", `{"v":1.50,"big":12345678901234567890}`)),
			{Text: "done"},
		}),
		Tools: []agent.Tool{must(t)(agent.NewRawTool(
			agent.ToolDef{Name: "echo", Parameters: json.RawMessage(`{"type":"object"}`)},
			func(ctx *agent.RunContext, args json.RawMessage) (any, error) { return args, nil }))},
		NewID: func() string {
			mu.Lock()
			defer mu.Unlock()
			id := ids[0]
			ids = ids[1:]
			return id
		},
		Clock: func() time.Time { return clock },
	})
	res, err := a.Run(context.Background(), agent.RunInput{Prompt: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if res.RunID != "run-1" || res.ConversationID != "conv-1" {
		t.Fatalf("ids = %s, %s", res.RunID, res.ConversationID)
	}
	for _, m := range res.AllMessages {
		if m.RunID != "run-1" || m.ConversationID != "conv-1" || !m.Timestamp.Equal(clock) {
			t.Fatalf("message not stamped: %+v", m)
		}
	}
	if got := string(res.AllMessages[2].Parts[0].Value); got != `{"v":1.50,"big":12345678901234567890}` {
		t.Errorf("tool return value = %s, want the args as sent", got)
	}
	b, err := json.Marshal(res.AllMessages)
	if err != nil {
		t.Fatal(err)
	}
	var viaJSON []agent.Message
	if err := json.Unmarshal(b, &viaJSON); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res.AllMessages, viaJSON); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
	b, err = msgpack.Marshal(res.AllMessages)
	if err != nil {
		t.Fatal(err)
	}
	var viaMsgpack []agent.Message
	if err := msgpack.Unmarshal(b, &viaMsgpack); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(res.AllMessages, viaMsgpack); diff != "" {
		t.Errorf("msgpack round trip (-want +got):\n%s", diff)
	}
}

// Events carry text deltas from a streaming model, and every event encodes
// to JSON for the bus.
func TestEventsStreamAndEncode(t *testing.T) {
	t.Parallel()
	a := mustAgent(t, agent.Config{
		Model: agent.NewScriptModel("", []agent.ScriptResponse{
			calls(call("ask", "a1", `{}`)),
			{Text: "all done now"},
		}),
		Tools: []agent.Tool{must(t)(agent.NewTool("ask", "", func(*agent.RunContext, struct{}) (string, error) { return "ok", nil }, agent.RequiresApproval()))},
		Handlers: []agent.Handler{agent.HandlerFunc(func(ctx *agent.RunContext, r *deferred.Requests) (*deferred.Results, error) {
			return r.BuildResults(nil, nil, nil, true)
		})},
	})
	var kinds []agent.EventKind
	var text strings.Builder
	for ev, err := range a.Events(context.Background(), agent.RunInput{Prompt: "go"}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.RunID == "" || ev.ConversationID == "" {
			t.Errorf("event without ids: %+v", ev)
		}
		if ev.Kind == agent.EventTextDelta {
			text.WriteString(ev.Delta)
			continue
		}
		kinds = append(kinds, ev.Kind)
		if _, err := json.Marshal(ev); err != nil {
			t.Errorf("encode %s event: %v", ev.Kind, err)
		}
	}
	want := []agent.EventKind{agent.EventModelResponse, agent.EventToolCall, agent.EventDeferredRequests,
		agent.EventDeferredResults, agent.EventToolResult, agent.EventModelResponse, agent.EventRunDone}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if text.String() != "all done now" {
		t.Errorf("deltas = %q", text.String())
	}
}

// Stopping the iteration ends the run and its tool bodies.
func TestEventsStopEarly(t *testing.T) {
	t.Parallel()
	blocked := make(chan struct{})
	a := mustAgent(t, agent.Config{
		Model: agent.NewScriptModel("", []agent.ScriptResponse{calls(call("slow", "s1", `{}`), call("fast", "f1", `{}`))}),
		Tools: []agent.Tool{
			must(t)(agent.NewTool("slow", "", func(ctx *agent.RunContext, _ struct{}) (string, error) {
				close(blocked)
				<-ctx.Context().Done()
				return "", ctx.Context().Err()
			})),
			must(t)(agent.NewTool("fast", "", func(*agent.RunContext, struct{}) (string, error) { return "ok", nil })),
		},
	})
	for ev, err := range a.Events(context.Background(), agent.RunInput{Prompt: "go"}) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Kind == agent.EventToolCall {
			<-blocked
			break
		}
	}
}

func TestScriptModel(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "script.yaml")
	script := "- calls:\n    - tool: add\n      args: {a: 1, b: 2}\n- text: three\n"
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := agent.LoadScriptModel(path)
	if err != nil {
		t.Fatal(err)
	}
	type addArgs struct {
		A int `json:"a"`
		B int `json:"b"`
	}
	a := mustAgent(t, agent.Config{Model: m, Tools: []agent.Tool{must(t)(agent.NewTool("add", "",
		func(ctx *agent.RunContext, x addArgs) (int, error) { return x.A + x.B, nil }))}})
	res, err := a.Run(context.Background(), agent.RunInput{Prompt: "1+2"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Output != "three" || string(res.AllMessages[2].Parts[0].Value) != "3" || res.AllMessages[1].Parts[0].ToolCallID != "call_0_0" {
		t.Errorf("unexpected run: %q %+v", res.Output, res.AllMessages)
	}
	// A follow-up in the same conversation has run past the script's end.
	if _, err := a.Run(context.Background(), agent.RunInput{Prompt: "again", History: res.AllMessages}); err == nil || !strings.Contains(err.Error(), "exhausted") {
		t.Errorf("error = %v, want the script exhausted", err)
	}
	if _, err := agent.ParseScript([]byte(`[{"text":""}]`)); err == nil {
		t.Error("ParseScript accepted an empty response")
	}
}

func TestTestModel(t *testing.T) {
	t.Parallel()
	type greetArgs struct {
		Name  string `json:"name"`
		Times int    `json:"times" jsonschema:"minimum=2"`
	}
	a := mustAgent(t, agent.Config{Model: agent.NewTestModel(), Tools: []agent.Tool{must(t)(agent.NewTool("greet", "",
		func(ctx *agent.RunContext, g greetArgs) (string, error) {
			return strings.Repeat("hi "+g.Name+" ", g.Times), nil
		}))}})
	res, err := a.Run(context.Background(), agent.RunInput{Prompt: "test"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := agent.OutputAs[map[string]string](res)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"greet": "hi a hi a "}, got); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
}

// Text deltas come only from a model that streams: Run asks no model to
// stream, Events offers a StreamFunc, and a model that does not call it
// yields no delta events.
func TestTextDeltasOnlyFromStreamingModels(t *testing.T) {
	t.Parallel()
	newAgent := func(stream bool, offered *bool) *agent.Agent {
		return mustAgent(t, agent.Config{Model: agent.FunctionModel("m", func(_ context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
			*offered = req.StreamFunc != nil
			if stream && req.StreamFunc != nil {
				req.StreamFunc("hel")
				req.StreamFunc("lo")
			}
			return agent.ModelResponse{Parts: []agent.Part{{Kind: agent.PartText, Content: "hello"}}}, nil
		})})
	}
	tests := []struct {
		name       string
		stream     bool
		events     bool
		wantOffer  bool
		wantDeltas []string
	}{
		{name: "run", stream: true, events: false, wantOffer: false},
		{name: "events, streaming model", stream: true, events: true, wantOffer: true, wantDeltas: []string{"hel", "lo"}},
		{name: "events, model that does not stream", stream: false, events: true, wantOffer: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var offered bool
			a := newAgent(tt.stream, &offered)
			var deltas []string
			if tt.events {
				for ev, err := range a.Events(context.Background(), agent.RunInput{Prompt: "hi"}) {
					if err != nil {
						t.Fatal(err)
					}
					if ev.Kind == agent.EventTextDelta {
						deltas = append(deltas, ev.Delta)
					}
				}
			} else if _, err := a.Run(context.Background(), agent.RunInput{Prompt: "hi"}); err != nil {
				t.Fatal(err)
			}
			if offered != tt.wantOffer {
				t.Errorf("StreamFunc offered = %v, want %v", offered, tt.wantOffer)
			}
			if diff := cmp.Diff(tt.wantDeltas, deltas); diff != "" {
				t.Errorf("deltas (-want +got):\n%s", diff)
			}
		})
	}
}

// BeforeEffects is called before a tool's body runs, and its error ends
// the run without the body; a run that only asks its model never calls it.
func TestBeforeEffects(t *testing.T) {
	t.Parallel()
	ran := 0
	tool := must(t)(agent.NewTool("touch", "Touch", func(_ *agent.RunContext, _ struct{}) (string, error) {
		ran++
		return "touched", nil
	}))
	script := func() agent.Model {
		return agent.NewScriptModel("", []agent.ScriptResponse{calls(call("touch", "c1", `{}`)), {Text: "done"}})
	}
	var order []string
	a := mustAgent(t, agent.Config{Model: script(), Tools: []agent.Tool{tool}})
	res, err := a.Run(context.Background(), agent.RunInput{Prompt: "go", BeforeEffects: func(context.Context) error {
		order = append(order, "before", "ran="+string(rune('0'+ran)))
		return nil
	}})
	if err != nil || res.Output != "done" || ran != 1 {
		t.Fatalf("output %q, err %v, ran %d", res.Output, err, ran)
	}
	if diff := cmp.Diff([]string{"before", "ran=0"}, order); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}

	refused := errors.New("not now")
	a = mustAgent(t, agent.Config{Model: script(), Tools: []agent.Tool{tool}})
	if _, err := a.Run(context.Background(), agent.RunInput{Prompt: "go", BeforeEffects: func(context.Context) error { return refused }}); !errors.Is(err, refused) || ran != 1 {
		t.Errorf("err %v, ran %d; want the hook's error and no body run", err, ran)
	}

	a = mustAgent(t, agent.Config{Model: agent.NewScriptModel("", []agent.ScriptResponse{{Text: "hi"}}), Tools: []agent.Tool{tool}})
	if _, err := a.Run(context.Background(), agent.RunInput{Prompt: "go", BeforeEffects: func(context.Context) error { return refused }}); err != nil {
		t.Errorf("a run of its model alone called the hook: %v", err)
	}

	// A tool without effects (one that defers its calls) runs without it.
	deferring := must(t)(agent.NewTool("later", "Later", func(_ *agent.RunContext, _ struct{}) (string, error) {
		return "", deferred.CallDeferred(nil)
	}, agent.WithoutEffects()))
	a = mustAgent(t, agent.Config{Model: agent.NewScriptModel("", []agent.ScriptResponse{calls(call("later", "c2", `{}`))}), Tools: []agent.Tool{deferring}, AllowDeferred: true})
	res, err = a.Run(context.Background(), agent.RunInput{Prompt: "go", BeforeEffects: func(context.Context) error { return refused }})
	if err != nil || res.Deferred == nil || len(res.Deferred.Calls) != 1 {
		t.Errorf("deferred %+v, err %v; want the call deferred without the hook", res, err)
	}
}
