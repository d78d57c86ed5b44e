package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
)

// gatedDeploy is an external toolset (D3) wrapped with a predicate that holds
// calls for env "prod" for approval (D4). It records the ids the predicate is
// asked about.
type gatedDeploy struct {
	mu    sync.Mutex
	asked []string
}

func (g *gatedDeploy) toolset(t *testing.T) agent.Toolset {
	t.Helper()
	ext, err := agent.ExternalToolset(agent.ToolDef{
		Name:       "deploy",
		Parameters: json.RawMessage(`{"type":"object","properties":{"env":{"type":"string"}},"required":["env"]}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	return agent.ApprovalToolset(ext, func(ctx *agent.RunContext, _ agent.ToolDef, args json.RawMessage) (bool, error) {
		g.mu.Lock()
		g.asked = append(g.asked, ctx.ToolCallID)
		g.mu.Unlock()
		var a struct{ Env string }
		if err := json.Unmarshal(args, &a); err != nil {
			return false, err
		}
		return a.Env == "prod", nil
	})
}

func (g *gatedDeploy) askedIDs() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string{}, g.asked...)
}

func dcall(name, id, args string) deferred.Call {
	return deferred.Call{ToolName: name, ToolCallID: id, Args: json.RawMessage(args)}
}

// requestsDiff compares batches with args as JSON values.
func requestsDiff(want, got *deferred.Requests) string {
	return cmp.Diff(want, got, cmp.Comparer(func(a, b json.RawMessage) bool {
		return len(a) == len(b) && len(a) == 0 || jsonEqual(a, b)
	}))
}

// partsOf lists the parts of msgs as short strings: kind, id, content or
// value, outcome and metadata.
func partsOf(msgs []agent.Message) []string {
	var out []string
	for _, m := range msgs {
		for _, p := range m.Parts {
			s := string(p.Kind) + ":" + p.ToolCallID
			switch p.Kind {
			case agent.PartToolCall:
				s += " " + string(p.Args)
			case agent.PartToolReturn:
				s += " " + string(p.Value) + " " + string(p.Outcome)
				if p.Metadata != nil {
					s += " " + string(p.Metadata)
				}
			default:
				s += " " + p.Content
			}
			out = append(out, s)
		}
	}
	return out
}

// An external toolset behind an approval predicate: the predicate is asked
// after schema validation and before the call is deferred; a held call waits
// for a decision; once approved it is deferred again as an external call whose
// batch entry carries the approved override args (D3, D4, D5, D8, D24, D26).
func TestApprovalGatedExternalCall(t *testing.T) {
	t.Parallel()
	g := &gatedDeploy{}
	model := agent.NewScriptModel("", []agent.ScriptResponse{
		calls(call("deploy", "d1", `{"env":"prod"}`), call("deploy", "d2", `{"env":"dev"}`), call("deploy", "d3", `{"env":5}`)),
		{Text: "done"},
	})
	a := mustAgent(t, agent.Config{
		Model:         model,
		Toolsets:      []agent.Toolset{g.toolset(t)},
		AllowDeferred: true,
	})

	first, events, err := runStep(a, agent.RunInput{Prompt: "deploy"})
	if err != nil {
		t.Fatal(err)
	}
	// D5: the invalid call d3 goes back to the model and never reaches the
	// predicate; D4: the predicate decides d1 and d2.
	if diff := cmp.Diff([]string{"d1", "d2"}, g.askedIDs()); diff != "" {
		t.Errorf("predicate asked (-want +got):\n%s", diff)
	}
	want := &deferred.Requests{
		Approvals: []deferred.Call{dcall("deploy", "d1", `{"env":"prod"}`)},
		Calls:     []deferred.Call{dcall("deploy", "d2", `{"env":"dev"}`)},
		Metadata:  map[string]json.RawMessage{},
	}
	if diff := requestsDiff(want, first.Deferred); diff != "" {
		t.Errorf("first batch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"tool_call:d1", "tool_call:d2", "tool_call:d3", "tool_result:d3", "deferred_requests:a=d1;c=d2"}, events); diff != "" {
		t.Errorf("first events (-want +got):\n%s", diff)
	}

	t.Run("approved with override args defers again as a call", func(t *testing.T) {
		t.Parallel()
		g := &gatedDeploy{}
		a := mustAgent(t, agent.Config{Model: model, Toolsets: []agent.Toolset{g.toolset(t)}, AllowDeferred: true})
		reqs, err := roundTripRequests(first.Deferred)
		if err != nil {
			t.Fatal(err)
		}
		res := &deferred.Results{
			Approvals: map[string]deferred.Decision{"d1": deferred.Approved{OverrideArgs: json.RawMessage(`{"env":"prod-eu"}`)}},
			Calls:     map[string]deferred.Result{"d2": deferred.Value{Value: json.RawMessage(`"dev ok"`)}},
		}
		second, events, err := runStep(a, agent.RunInput{History: first.AllMessages, Requests: reqs, Results: res})
		if err != nil {
			t.Fatal(err)
		}
		// D26 with D24: the approved call pauses the resume as an external
		// call; its entry carries the args the worker must run.
		want := &deferred.Requests{
			Approvals: []deferred.Call{},
			Calls:     []deferred.Call{dcall("deploy", "d1", `{"env":"prod-eu"}`)},
			Metadata:  map[string]json.RawMessage{},
		}
		if diff := requestsDiff(want, second.Deferred); diff != "" {
			t.Errorf("second batch (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"tool_call:d1", "tool_call:d2", "tool_result:d2", "deferred_requests:c=d1"}, events); diff != "" {
			t.Errorf("second events (-want +got):\n%s", diff)
		}
		if got := g.askedIDs(); len(got) != 0 {
			t.Errorf("predicate asked again for %v; an approved call is not re-gated", got)
		}
		if diff := cmp.Diff([]string{`tool-return:d2 "dev ok" success`}, partsOf(second.NewMessages)); diff != "" {
			t.Errorf("second new messages (-want +got):\n%s", diff)
		}
		// D24: history keeps the model's original call.
		if diff := cmp.Diff([]string{`tool-call:d1 {"env":"prod"}`}, partsOf(second.AllMessages[1:2])[:1]); diff != "" {
			t.Errorf("history's call (-want +got):\n%s", diff)
		}

		reqs, err = roundTripRequests(second.Deferred)
		if err != nil {
			t.Fatal(err)
		}
		res = &deferred.Results{Calls: map[string]deferred.Result{"d1": deferred.Value{Value: json.RawMessage(`"deployed to prod-eu"`)}}}
		third, events, err := runStep(a, agent.RunInput{History: second.AllMessages, Requests: reqs, Results: res})
		if err != nil {
			t.Fatal(err)
		}
		if third.Output != "done" {
			t.Errorf("output = %q", third.Output)
		}
		if diff := cmp.Diff([]string{"tool_call:d1", "tool_result:d1"}, events); diff != "" {
			t.Errorf("third events (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{`tool-return:d1 "deployed to prod-eu" success`, "text: done"}, partsOf(third.NewMessages)); diff != "" {
			t.Errorf("third new messages (-want +got):\n%s", diff)
		}
	})

	// D21 with D26: a prompt given with a resume that pauses again is held
	// for the next resume, so that the history has it after the result
	// still to come, in the order the model reads them.
	t.Run("a resume's prompt waits while it pauses again", func(t *testing.T) {
		t.Parallel()
		a := mustAgent(t, agent.Config{Model: model, Toolsets: []agent.Toolset{(&gatedDeploy{}).toolset(t)}, AllowDeferred: true})
		res := &deferred.Results{
			Approvals: map[string]deferred.Decision{"d1": deferred.Approved{}},
			Calls:     map[string]deferred.Result{"d2": deferred.Value{Value: json.RawMessage(`"dev ok"`)}},
		}
		second, _, err := runStep(a, agent.RunInput{History: first.AllMessages, Requests: first.Deferred, Results: res, Prompt: "then tell me"})
		if err != nil {
			t.Fatal(err)
		}
		if second.Deferred == nil || second.HeldPrompt != "then tell me" {
			t.Fatalf("paused %v with held prompt %q, want paused holding the prompt", second.Paused(), second.HeldPrompt)
		}
		if diff := cmp.Diff([]string{`tool-return:d2 "dev ok" success`}, partsOf(second.NewMessages)); diff != "" {
			t.Errorf("second new messages (-want +got):\n%s", diff)
		}
		res = &deferred.Results{Calls: map[string]deferred.Result{"d1": deferred.Value{Value: json.RawMessage(`"deployed"`)}}}
		third, _, err := runStep(a, agent.RunInput{History: second.AllMessages, Requests: second.Deferred, Results: res, Prompt: second.HeldPrompt})
		if err != nil {
			t.Fatal(err)
		}
		if third.HeldPrompt != "" {
			t.Errorf("third run holds %q", third.HeldPrompt)
		}
		want := []string{`tool-return:d1 "deployed" success`, "user-prompt: then tell me", "text: done"}
		if diff := cmp.Diff(want, partsOf(third.NewMessages)); diff != "" {
			t.Errorf("third new messages (-want +got):\n%s", diff)
		}
	})

	t.Run("invalid override args are a retry prompt", func(t *testing.T) {
		t.Parallel()
		res := &deferred.Results{
			Approvals: map[string]deferred.Decision{"d1": deferred.Approved{OverrideArgs: json.RawMessage(`{"env":7}`)}},
			Calls:     map[string]deferred.Result{"d2": deferred.Value{Value: json.RawMessage(`"dev ok"`)}},
		}
		out, err := a.Run(context.Background(), agent.RunInput{History: first.AllMessages, Requests: first.Deferred, Results: res})
		if err != nil {
			t.Fatal(err)
		}
		got := partsOf(out.NewMessages)
		if len(got) != 3 || !strings.HasPrefix(got[0], "retry-prompt:d1 ") || got[1] != `tool-return:d2 "dev ok" success` || got[2] != "text: done" {
			t.Errorf("new messages = %q, want a retry for d1, d2's return, then the text", got)
		}
	})

	t.Run("denied is not deferred", func(t *testing.T) {
		t.Parallel()
		res := &deferred.Results{
			Approvals: map[string]deferred.Decision{"d1": deferred.Denied{Message: "not today"}},
			Calls:     map[string]deferred.Result{"d2": deferred.Value{Value: json.RawMessage(`"dev ok"`)}},
		}
		out, err := a.Run(context.Background(), agent.RunInput{History: first.AllMessages, Requests: first.Deferred, Results: res})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{`tool-return:d1 "not today" denied`, `tool-return:d2 "dev ok" success`, "text: done"}
		if diff := cmp.Diff(want, partsOf(out.NewMessages)); diff != "" {
			t.Errorf("new messages (-want +got):\n%s", diff)
		}
	})

	// D12: without the paused Requests, a held call of a gated external
	// tool may wait for its approval or, approved, for its result.
	t.Run("without requests the held call cannot be categorised", func(t *testing.T) {
		t.Parallel()
		res := &deferred.Results{
			Approvals: map[string]deferred.Decision{"d1": deferred.Approved{}},
			Calls:     map[string]deferred.Result{"d2": deferred.Value{Value: json.RawMessage(`"dev ok"`)}},
		}
		_, err := a.Run(context.Background(), agent.RunInput{History: first.AllMessages, Results: res})
		if err == nil || !strings.Contains(err.Error(), "d1") || !strings.Contains(err.Error(), "cannot be told") {
			t.Errorf("error = %v, want d1 named as not categorisable", err)
		}
	})
}

// D17: a handler's approval of a gated external call defers it again, with the
// override args in its entry; handlers are not asked again and it gets no
// ToolResult event.
func TestHandlerApprovesGatedExternalCall(t *testing.T) {
	t.Parallel()
	g := &gatedDeploy{}
	var mu sync.Mutex
	handled := 0
	a := mustAgent(t, agent.Config{
		Model:    agent.NewScriptModel("", []agent.ScriptResponse{calls(call("deploy", "d1", `{"env":"prod"}`), call("deploy", "d2", `{"env":"dev"}`))}),
		Toolsets: []agent.Toolset{g.toolset(t)},
		Handlers: []agent.Handler{agent.HandlerFunc(func(ctx *agent.RunContext, r *deferred.Requests) (*deferred.Results, error) {
			mu.Lock()
			handled++
			mu.Unlock()
			return r.BuildResults(map[string]deferred.Decision{"d1": deferred.Approved{OverrideArgs: json.RawMessage(`{"env":"prod-eu"}`)}}, nil, nil, false)
		})},
		AllowDeferred: true,
	})
	res, events, err := runStep(a, agent.RunInput{Prompt: "deploy"})
	if err != nil {
		t.Fatal(err)
	}
	want := &deferred.Requests{
		Approvals: []deferred.Call{},
		Calls:     []deferred.Call{dcall("deploy", "d1", `{"env":"prod-eu"}`), dcall("deploy", "d2", `{"env":"dev"}`)},
		Metadata:  map[string]json.RawMessage{},
	}
	if diff := requestsDiff(want, res.Deferred); diff != "" {
		t.Errorf("batch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"tool_call:d1", "tool_call:d2", "deferred_requests:a=d1;c=d2", "deferred_results:a=d1"}, events); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if handled != 1 {
		t.Errorf("handler asked %d times, want 1", handled)
	}
	if diff := cmp.Diff([]string{"d1", "d2"}, g.askedIDs()); diff != "" {
		t.Errorf("predicate asked (-want +got):\n%s", diff)
	}
}

// D24, D26: a call approved with override args that asks for approval again is
// listed with the override args, and the resume given that batch runs the
// approved call with them, not with the model's.
func TestReDeferredApprovalKeepsOverrideArgs(t *testing.T) {
	t.Parallel()
	type run struct {
		Amount   int
		Approved bool
	}
	var mu sync.Mutex
	var ran []run
	body := func(ctx *agent.RunContext, a struct {
		Amount int `json:"amount"`
	}) (string, error) {
		mu.Lock()
		ran = append(ran, run{a.Amount, ctx.ToolCallApproved})
		n := len(ran)
		mu.Unlock()
		if n == 1 {
			return "", deferred.ApprovalRequired(map[string]string{"step": "confirm"})
		}
		return "sent", nil
	}
	a := mustAgent(t, agent.Config{
		Model: agent.NewScriptModel("", []agent.ScriptResponse{
			calls(call("transfer", "t1", `{"amount":100}`)),
			{Text: "ok"},
		}),
		Tools:         []agent.Tool{must(t)(agent.NewTool("transfer", "", body, agent.RequiresApproval()))},
		AllowDeferred: true,
	})
	ctx := context.Background()
	first, err := a.Run(ctx, agent.RunInput{Prompt: "send"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := a.Run(ctx, agent.RunInput{History: first.AllMessages, Requests: first.Deferred, Results: &deferred.Results{
		Approvals: map[string]deferred.Decision{"t1": deferred.Approved{OverrideArgs: json.RawMessage(`{"amount":50}`)}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := &deferred.Requests{
		Approvals: []deferred.Call{dcall("transfer", "t1", `{"amount":50}`)},
		Calls:     []deferred.Call{},
		Metadata:  map[string]json.RawMessage{"t1": json.RawMessage(`{"step":"confirm"}`)},
	}
	if diff := requestsDiff(want, second.Deferred); diff != "" {
		t.Errorf("second batch (-want +got):\n%s", diff)
	}
	reqs, err := roundTripRequests(second.Deferred)
	if err != nil {
		t.Fatal(err)
	}
	third, err := a.Run(ctx, agent.RunInput{History: second.AllMessages, Requests: reqs, Results: &deferred.Results{
		Approvals: map[string]deferred.Decision{"t1": deferred.Approved{}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if third.Output != "ok" {
		t.Errorf("output = %q", third.Output)
	}
	if diff := cmp.Diff([]run{{50, true}, {50, true}}, ran); diff != "" {
		t.Errorf("executions (-want +got):\n%s", diff)
	}
	t.Run("entry of another tool", func(t *testing.T) {
		t.Parallel()
		bad := &deferred.Requests{Approvals: []deferred.Call{dcall("other", "t1", `{"amount":50}`)}}
		_, err := a.Run(ctx, agent.RunInput{History: second.AllMessages, Requests: bad, Results: &deferred.Results{
			Approvals: map[string]deferred.Decision{"t1": deferred.Approved{}},
		}})
		if err == nil || !strings.Contains(err.Error(), "t1") {
			t.Errorf("error = %v, want a mismatch naming t1", err)
		}
	})
}

// D22 with D37: Results.Metadata of a denied call stays on its denied
// tool-return part, whether the denial comes with a resume or from a
// handler; a denial without metadata (or with null) keeps none.
func TestDeniedCallKeepsResultMetadata(t *testing.T) {
	t.Parallel()
	decisions := map[string]deferred.Decision{
		"r1": deferred.Denied{Message: "approval expired"},
		"r2": deferred.Denied{},
		"r3": deferred.Denied{Message: "no"},
	}
	meta := map[string]json.RawMessage{"r1": json.RawMessage(`{"reason":"expired"}`), "r3": json.RawMessage(`null`)}
	wantParts := []string{
		`tool-return:r1 "approval expired" denied {"reason":"expired"}`,
		`tool-return:r2 "The tool call was denied." denied`,
		`tool-return:r3 "no" denied`,
	}
	newAgent := func(handlers ...agent.Handler) *agent.Agent {
		return mustAgent(t, agent.Config{
			Model: agent.NewScriptModel("", []agent.ScriptResponse{
				calls(call("rm", "r1", `{}`), call("rm", "r2", `{}`), call("rm", "r3", `{}`)),
				{Text: "ok"},
			}),
			Tools: []agent.Tool{must(t)(agent.NewTool("rm", "", func(*agent.RunContext, struct{}) (string, error) {
				return "", errors.New("a denied call ran")
			}, agent.RequiresApproval()))},
			Handlers:      handlers,
			AllowDeferred: true,
		})
	}
	tests := []struct {
		name string
		run  func(t *testing.T) (*agent.RunResult, []agent.Event)
	}{
		{"resume", func(t *testing.T) (*agent.RunResult, []agent.Event) {
			a := newAgent()
			first, err := a.Run(context.Background(), agent.RunInput{Prompt: "rm"})
			if err != nil {
				t.Fatal(err)
			}
			res, err := first.Deferred.BuildResults(decisions, nil, meta, false)
			if err != nil {
				t.Fatal(err)
			}
			return collect(t, a, agent.RunInput{History: first.AllMessages, Requests: first.Deferred, Results: res})
		}},
		{"handler", func(t *testing.T) (*agent.RunResult, []agent.Event) {
			a := newAgent(agent.HandlerFunc(func(_ *agent.RunContext, r *deferred.Requests) (*deferred.Results, error) {
				return r.BuildResults(decisions, nil, meta, false)
			}))
			return collect(t, a, agent.RunInput{Prompt: "rm"})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, events := tt.run(t)
			var returns []agent.Message
			for _, m := range res.NewMessages {
				if m.Kind == agent.KindRequest && len(m.Parts) > 0 && m.Parts[0].Kind == agent.PartToolReturn {
					returns = append(returns, m)
				}
			}
			if diff := cmp.Diff(wantParts, partsOf(returns)); diff != "" {
				t.Errorf("tool returns (-want +got):\n%s", diff)
			}
			var fromEvents []string
			for _, ev := range events {
				if ev.Kind == agent.EventToolResult {
					fromEvents = append(fromEvents, partsOf([]agent.Message{{Parts: []agent.Part{*ev.Part}}})...)
				}
			}
			if diff := cmp.Diff(wantParts, fromEvents); diff != "" {
				t.Errorf("tool result events (-want +got):\n%s", diff)
			}
		})
	}
}

func collect(t *testing.T, a *agent.Agent, in agent.RunInput) (*agent.RunResult, []agent.Event) {
	t.Helper()
	var events []agent.Event
	for ev, err := range a.Events(context.Background(), in) {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, ev)
		if ev.Kind == agent.EventRunDone {
			return ev.Result, events
		}
	}
	t.Fatal("no result")
	return nil, nil
}
