package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/deferred"
)

// The conformance scenarios (../shared/conformance, FORMAT.md) run against
// the agent core here: tools, handlers and the model are data; each step's
// run must produce exactly what the scenario expects.

type scenario struct {
	Name     string      `json:"name"`
	Note     string      `json:"note"`
	Rules    []string    `json:"rules"`
	Tools    []scTool    `json:"tools"`
	Handlers []scHandler `json:"handlers"`
	Output   string      `json:"output"`
	Steps    []scStep    `json:"steps"`
}

type scTool struct {
	Name             string          `json:"name"`
	Description      string          `json:"description"`
	Params           json.RawMessage `json:"params"`
	RequiresApproval bool            `json:"requires_approval"`
	External         bool            `json:"external"`
	Retries          *int            `json:"retries"`
	Validator        []scRule        `json:"validator"`
	Behavior         []scRule        `json:"behavior"`
}

type scRule struct {
	When struct {
		Args      map[string]json.RawMessage `json:"args"`
		Approved  *bool                      `json:"approved"`
		Execution *int                       `json:"execution"`
		Metadata  json.RawMessage            `json:"metadata"` // nil: not given; "null": none
	} `json:"when"`
	DelayMS int                        `json:"delay_ms"`
	Do      map[string]json.RawMessage `json:"do"`
}

type scHandler struct {
	Approve  json.RawMessage            `json:"approve"`
	Deny     map[string]string          `json:"deny"`
	Override map[string]json.RawMessage `json:"override"`
	Results  map[string]json.RawMessage `json:"results"`
	Metadata map[string]json.RawMessage `json:"metadata"`
	Decline  bool                       `json:"decline"`
}

type scStep struct {
	Run struct {
		Prompt  string          `json:"prompt"`
		Results json.RawMessage `json:"results"`
		RunID   string          `json:"run_id"`
		History json.RawMessage `json:"history"`
	} `json:"run"`
	Model  []scResponse `json:"model"`
	Expect scExpect     `json:"expect"`
}

type scResponse struct {
	Calls []struct {
		Tool string          `json:"tool"`
		ID   string          `json:"id"`
		Args json.RawMessage `json:"args"`
	} `json:"calls"`
	Text string `json:"text"`
}

type scExpect struct {
	Error        *string         `json:"error"`
	Output       json.RawMessage `json:"output"`
	NewMessages  json.RawMessage `json:"new_messages"`
	ModelSawLast json.RawMessage `json:"model_saw_last"`
	Events       *[]string       `json:"events"`
	Executions   json.RawMessage `json:"executions"`
	RunIDFresh   bool            `json:"run_id_fresh"`
}

func conformanceDir(t *testing.T) string {
	if d := os.Getenv("TOOLGATE_CONFORMANCE_DIR"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared", "conformance")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory: set TOOLGATE_CONFORMANCE_DIR")
		}
		dir = parent
	}
}

func TestConformance(t *testing.T) {
	runScenarioDir(t, conformanceDir(t))
}

// TestConformanceLocal runs this package's own scenarios, which cover what
// the shared ones leave out: parallel bodies with delays, and resumes from a
// given history.
func TestConformanceLocal(t *testing.T) {
	runScenarioDir(t, filepath.Join("testdata", "conformance"))
}

// conformanceRepeat is how many times each scenario runs. Bodies of one
// phase run concurrently, so a scenario that depends on their interleaving
// passes by luck now and then; one pass catches a race in about half the
// runs, so 25 miss it about once in 30 million.
// TOOLGATE_CONFORMANCE_REPEAT overrides it.
func conformanceRepeat(t *testing.T) int {
	if v := os.Getenv("TOOLGATE_CONFORMANCE_REPEAT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("TOOLGATE_CONFORMANCE_REPEAT=%q: want a positive integer", v)
		}
		return n
	}
	if testing.Short() {
		return 3
	}
	return 25
}

func runScenarioDir(t *testing.T, dir string) {
	repeat := conformanceRepeat(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no conformance scenarios (*.json) in %s: set TOOLGATE_CONFORMANCE_DIR", dir)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for i := range repeat {
				var sc scenario
				dec := json.NewDecoder(bytes.NewReader(b))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&sc); err != nil {
					t.Fatalf("scenario %s: %v", name, err)
				}
				runScenario(t, &sc)
				if t.Failed() {
					t.Logf("failed on pass %d of %d", i+1, repeat)
					return
				}
			}
		})
	}
}

// execution is one entry into a tool body. Validators run one after another
// in emission order before the bodies of their phase start, so an execution
// is reserved (and numbered) when its call passes the validator, and counts
// once the body has entered.
type execution struct {
	tool     string
	args     json.RawMessage
	approved bool
	metadata json.RawMessage
	n        int
	entered  bool
}

// callKey names one call of a model response. Not the id alone: two calls
// of one response may share a tool_call_id (D9), and their bodies run
// concurrently, so only the position pairs a body with its validator.
type callKey struct {
	id    string
	index int
}

func keyOf(ctx *agent.RunContext) callKey { return callKey{ctx.ToolCallID, ctx.ToolCallIndex} }

// world is a scenario's state while it runs.
type world struct {
	sc *scenario

	mu       sync.Mutex
	execN    map[string]int         // body entries per tool, whole scenario
	tickets  map[callKey]*execution // reserved executions by call
	execs    []*execution           // this step's reserved executions, in order
	problems []string               // misbehaviour of the loop the runner noticed

	script     []scResponse
	modelCalls int
	lastSaw    []agent.Part

	resolved map[string]bool // ids resolved by earlier handlers of this batch
}

func (w *world) problem(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

func runScenario(t *testing.T, sc *scenario) {
	w := &world{sc: sc, execN: map[string]int{}, tickets: map[callKey]*execution{}}
	cfg := agent.Config{AllowDeferred: sc.Output == "text+deferred"}
	var externals []agent.ToolDef
	for _, st := range sc.Tools {
		def := agent.ToolDef{Name: st.Name, Description: st.Description, Parameters: st.Params}
		if st.External {
			externals = append(externals, def)
			continue
		}
		opts := []agent.ToolOption{agent.WithValidator(w.validator(st))}
		if st.RequiresApproval {
			opts = append(opts, agent.RequiresApproval())
		}
		if st.Retries != nil {
			opts = append(opts, agent.WithRetries(*st.Retries))
		}
		tool, err := agent.NewRawTool(def, w.body(st), opts...)
		if err != nil {
			t.Fatalf("scenario %s: tool %s: %v", sc.Name, st.Name, err)
		}
		cfg.Tools = append(cfg.Tools, tool)
	}
	if len(externals) > 0 {
		ts, err := agent.ExternalToolset(externals...)
		if err != nil {
			t.Fatalf("scenario %s: external toolset: %v", sc.Name, err)
		}
		cfg.Toolsets = append(cfg.Toolsets, ts)
	}
	for i, h := range sc.Handlers {
		cfg.Handlers = append(cfg.Handlers, w.handler(i, h))
	}
	cfg.Model = agent.FunctionModel("scenario", w.respond)
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatalf("scenario %s: %v", sc.Name, err)
	}

	var history []agent.Message
	var requests *deferred.Requests
	var runIDs []string
	convID := ""
	for i, step := range sc.Steps {
		where := fmt.Sprintf("scenario %s (rules %s), step %d", sc.Name, strings.Join(sc.Rules, " "), i)
		fail := func(key string, want, got any) {
			t.Fatalf("%s: %s differs (-want +got):\n%s", where, key, cmp.Diff(want, got))
		}
		w.startStep(step.Model)

		in := agent.RunInput{Prompt: step.Run.Prompt, RunID: step.Run.RunID}
		switch h := step.Run.History; {
		case h == nil:
			hist, err := roundTripMessages(history)
			if err != nil {
				t.Fatalf("%s: history round trip: %v", where, err)
			}
			in.History = hist
			if requests != nil {
				if in.Requests, err = roundTripRequests(requests); err != nil {
					t.Fatalf("%s: requests round trip: %v", where, err)
				}
			}
		case string(h) == `"none"`:
		default:
			if in.History, err = messagesFromScenario(h); err != nil {
				t.Fatalf("%s: run.history: %v", where, err)
			}
		}

		res, events, runErr := func() (*agent.RunResult, []string, error) {
			if step.Run.Results != nil {
				results, err := resultsFromScenario(step.Run.Results)
				if err != nil {
					return nil, nil, err
				}
				in.Results = results
			}
			return runStep(a, in)
		}()

		w.mu.Lock()
		problems := slices.Clone(w.problems)
		w.problems = nil
		modelCalls := w.modelCalls
		lastSaw := w.lastSaw
		execs := w.endStep()
		w.mu.Unlock()
		if len(problems) > 0 {
			t.Fatalf("%s: %s", where, strings.Join(problems, "; "))
		}
		if modelCalls != len(step.Model) {
			t.Fatalf("%s: the model was called %d times, the step scripts %d responses (run error: %v)", where, modelCalls, len(step.Model), runErr)
		}
		ex := step.Expect
		if ex.Executions != nil {
			want, got := canonExecutions(ex.Executions, execs)
			if !cmp.Equal(want, got) {
				fail("executions", want, got)
			}
		}
		if ex.Error != nil {
			if runErr == nil {
				t.Fatalf("%s: want an error containing %q, the run succeeded", where, *ex.Error)
			}
			if !strings.Contains(strings.ToLower(runErr.Error()), strings.ToLower(*ex.Error)) {
				t.Fatalf("%s: want an error containing %q, got %q", where, *ex.Error, runErr)
			}
			continue
		}
		if runErr != nil {
			t.Fatalf("%s: run failed: %v", where, runErr)
		}
		if ex.Output != nil {
			want, got := mustAny(ex.Output), canonOutput(res)
			if !cmp.Equal(want, got) {
				fail("output", want, got)
			}
		}
		if ex.NewMessages != nil {
			want, got := canonMessages(ex.NewMessages, res.NewMessages)
			if !cmp.Equal(want, got) {
				fail("new_messages", want, got)
			}
		}
		if ex.ModelSawLast != nil {
			want, got := canonParts(ex.ModelSawLast, lastSaw)
			if !cmp.Equal(want, got) {
				fail("model_saw_last", want, got)
			}
		}
		if ex.Events != nil {
			want := *ex.Events
			if want == nil {
				want = []string{}
			}
			if !cmp.Equal(want, events) {
				fail("events", want, events)
			}
		}
		if ex.RunIDFresh {
			if slices.Contains(runIDs, res.RunID) {
				t.Fatalf("%s: run id %s is not fresh (earlier runs: %v)", where, res.RunID, runIDs)
			}
			if convID != "" && res.ConversationID != convID {
				t.Fatalf("%s: conversation id %s, want %s", where, res.ConversationID, convID)
			}
		}
		for _, m := range res.NewMessages {
			if m.RunID != res.RunID || m.ConversationID != res.ConversationID || m.Timestamp.IsZero() {
				t.Fatalf("%s: message not stamped with the run: %+v", where, m)
			}
		}
		runIDs = append(runIDs, res.RunID)
		if convID == "" {
			convID = res.ConversationID
		}
		history = res.AllMessages
		requests = res.Deferred
	}
}

// runStep runs the agent and collects the step's tool events as FORMAT.md
// writes them.
func runStep(a *agent.Agent, in agent.RunInput) (*agent.RunResult, []string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := []string{}
	var batch *deferred.Requests
	var res *agent.RunResult
	for ev, err := range a.Events(ctx, in) {
		if err != nil {
			return nil, events, err
		}
		switch ev.Kind {
		case agent.EventToolCall:
			events = append(events, "tool_call:"+ev.Part.ToolCallID)
		case agent.EventToolResult:
			events = append(events, "tool_result:"+ev.Part.ToolCallID)
		case agent.EventDeferredRequests:
			batch = ev.Requests
			events = append(events, "deferred_requests:"+sides(callIDs(ev.Requests.Approvals), callIDs(ev.Requests.Calls)))
		case agent.EventDeferredResults:
			var a, c []string
			if batch != nil {
				for _, id := range callIDs(batch.Approvals) {
					if _, ok := ev.Results.Approvals[id]; ok {
						a = append(a, id)
					}
				}
				for _, id := range callIDs(batch.Calls) {
					if _, ok := ev.Results.Calls[id]; ok {
						c = append(c, id)
					}
				}
			}
			events = append(events, "deferred_results:"+sides(a, c))
		case agent.EventRunDone:
			res = ev.Result
		}
	}
	if res == nil {
		return nil, events, errors.New("the event stream ended without a result")
	}
	return res, events, nil
}

func callIDs(calls []deferred.Call) []string {
	ids := make([]string, len(calls))
	for i, c := range calls {
		ids[i] = c.ToolCallID
	}
	return ids
}

func sides(a, c []string) string {
	var s []string
	if len(a) > 0 {
		s = append(s, "a="+strings.Join(a, ","))
	}
	if len(c) > 0 {
		s = append(s, "c="+strings.Join(c, ","))
	}
	return strings.Join(s, ";")
}

func (w *world) startStep(script []scResponse) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.script, w.modelCalls, w.lastSaw = script, 0, nil
	w.execs, w.tickets = nil, map[callKey]*execution{}
}

// endStep returns the step's executions and renumbers the tools' counts
// from the bodies that actually entered. w.mu is held.
func (w *world) endStep() []*execution {
	var entered []*execution
	for _, e := range w.execs {
		if e.entered {
			entered = append(entered, e)
		} else {
			w.execN[e.tool]--
		}
	}
	w.execs, w.tickets = nil, map[callKey]*execution{}
	return entered
}

// respond is the scripted model: the step's responses in order, text first.
func (w *world) respond(_ context.Context, req agent.ModelRequest) (agent.ModelResponse, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.modelCalls
	w.modelCalls++
	if n >= len(w.script) {
		return agent.ModelResponse{}, fmt.Errorf("the model was called %d times, the step scripts %d responses", n+1, len(w.script))
	}
	if len(req.Messages) > 0 {
		w.lastSaw = slices.Clone(req.Messages[len(req.Messages)-1].Parts)
	}
	r := w.script[n]
	var parts []agent.Part
	if r.Text != "" {
		parts = append(parts, agent.Part{Kind: agent.PartText, Content: r.Text})
	}
	for _, c := range r.Calls {
		parts = append(parts, agent.Part{Kind: agent.PartToolCall, ToolName: c.Tool, ToolCallID: c.ID, Args: c.Args})
	}
	return agent.ModelResponse{Parts: parts, Usage: agent.Usage{InputTokens: 10, OutputTokens: 5}}, nil
}

func (w *world) validator(st scTool) func(*agent.RunContext, json.RawMessage) error {
	return func(ctx *agent.RunContext, args json.RawMessage) error {
		w.mu.Lock()
		next := w.execN[st.Name] + 1
		w.mu.Unlock()
		if rule := match(st.Validator, ctx, args, next); rule != nil {
			if err := sleep(ctx, rule.DelayMS); err != nil {
				return err
			}
			if _, ok := rule.Do["ok"]; !ok {
				_, err := act(rule.Do, args)
				if err == nil {
					return fmt.Errorf("validator rule of %s returns a value", st.Name)
				}
				return err
			}
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.execN[st.Name]++
		e := &execution{tool: st.Name, args: args, approved: ctx.ToolCallApproved, metadata: ctx.ToolCallMetadata, n: w.execN[st.Name]}
		w.execs = append(w.execs, e)
		if _, held := w.tickets[keyOf(ctx)]; held {
			w.problems = append(w.problems, fmt.Sprintf("the validator of %s ran again for call %s (#%d) before its body", st.Name, ctx.ToolCallID, ctx.ToolCallIndex))
		}
		w.tickets[keyOf(ctx)] = e
		return nil
	}
}

func (w *world) body(st scTool) agent.RawToolFunc {
	return func(ctx *agent.RunContext, args json.RawMessage) (any, error) {
		w.mu.Lock()
		e := w.tickets[keyOf(ctx)]
		if e != nil {
			delete(w.tickets, keyOf(ctx))
			e.entered = true
		}
		w.mu.Unlock()
		if e == nil {
			w.problem("the body of %s ran for call %s without its validator", st.Name, ctx.ToolCallID)
			return nil, errors.New("body without validator")
		}
		if !bytes.Equal(e.args, args) || e.approved != ctx.ToolCallApproved || !bytes.Equal(e.metadata, ctx.ToolCallMetadata) {
			w.problem("the body of %s for call %s saw other args or context than its validator", st.Name, ctx.ToolCallID)
		}
		rule := match(st.Behavior, ctx, args, e.n)
		if rule == nil {
			return json.RawMessage("null"), nil
		}
		if err := sleep(ctx, rule.DelayMS); err != nil {
			return nil, err
		}
		return act(rule.Do, args)
	}
}

func sleep(ctx *agent.RunContext, ms int) error {
	if ms <= 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Context().Done():
		return ctx.Context().Err()
	}
}

func match(rules []scRule, ctx *agent.RunContext, args json.RawMessage, execution int) *scRule {
	var argMap map[string]json.RawMessage
	_ = json.Unmarshal(args, &argMap)
	for i := range rules {
		r := &rules[i]
		ok := true
		for k, v := range r.When.Args {
			if got, has := argMap[k]; !has || !jsonEqual(got, v) {
				ok = false
			}
		}
		if r.When.Approved != nil && *r.When.Approved != ctx.ToolCallApproved {
			ok = false
		}
		if r.When.Execution != nil && *r.When.Execution != execution {
			ok = false
		}
		if r.When.Metadata != nil {
			meta := ctx.ToolCallMetadata
			if len(meta) == 0 {
				meta = json.RawMessage("null")
			}
			if !jsonEqual(meta, r.When.Metadata) {
				ok = false
			}
		}
		if ok {
			return r
		}
	}
	return nil
}

// act performs a rule's action as a tool body or validator would.
func act(do map[string]json.RawMessage, args json.RawMessage) (any, error) {
	if len(do) != 1 {
		return nil, fmt.Errorf("an action has exactly one key, got %d", len(do))
	}
	var argMap map[string]json.RawMessage
	_ = json.Unmarshal(args, &argMap)
	for k, v := range do {
		switch k {
		case "return":
			return json.RawMessage(fill(v, argMap)), nil
		case "tool_return":
			var tr struct {
				Value    json.RawMessage `json:"value"`
				Content  string          `json:"content"`
				Metadata json.RawMessage `json:"metadata"`
			}
			if err := json.Unmarshal(v, &tr); err != nil {
				return nil, err
			}
			ret := agent.ToolReturn{Value: json.RawMessage(fill(tr.Value, argMap)), Content: tr.Content}
			if tr.Metadata != nil {
				ret.Metadata = tr.Metadata
			}
			return ret, nil
		case "approval_required", "call_deferred":
			var d struct {
				Metadata json.RawMessage `json:"metadata"`
			}
			if err := json.Unmarshal(v, &d); err != nil {
				return nil, err
			}
			var meta any
			if d.Metadata != nil {
				meta = d.Metadata
			}
			if k == "approval_required" {
				return nil, deferred.ApprovalRequired(meta)
			}
			return nil, deferred.CallDeferred(meta)
		case "model_retry", "tool_failed":
			var msg string
			if err := json.Unmarshal(v, &msg); err != nil {
				return nil, err
			}
			if k == "model_retry" {
				return nil, agent.ModelRetry(msg)
			}
			return nil, agent.ToolFailed(msg)
		case "ok":
			return nil, nil
		}
		return nil, fmt.Errorf("unknown action %q", k)
	}
	return nil, nil
}

// fill replaces {arg} in the strings of a JSON value: by the raw text of
// string args, by the JSON text of the others.
func fill(v json.RawMessage, args map[string]json.RawMessage) []byte {
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return v
	}
	var walk func(any) any
	walk = func(x any) any {
		switch x := x.(type) {
		case string:
			for k, a := range args {
				var s string
				text := string(a)
				if json.Unmarshal(a, &s) == nil {
					text = s
				}
				x = strings.ReplaceAll(x, "{"+k+"}", text)
			}
			return x
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		case map[string]any:
			for k := range x {
				x[k] = walk(x[k])
			}
		}
		return x
	}
	b, _ := json.Marshal(walk(x))
	return b
}

// handler answers as FORMAT.md's HANDLER says, through BuildResults where the
// ids allow it; ids that are not pending are passed on so that the run can
// refuse them (D16).
func (w *world) handler(index int, h scHandler) agent.Handler {
	return agent.HandlerFunc(func(ctx *agent.RunContext, req *deferred.Requests) (*deferred.Results, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if index == 0 {
			w.resolved = map[string]bool{}
		}
		if h.Decline {
			return nil, nil
		}
		approvals := map[string]deferred.Decision{}
		calls := map[string]deferred.Result{}
		meta := map[string]json.RawMessage{}
		skip := func(id string) bool { return w.resolved[id] }
		approveAll := false
		if h.Approve != nil {
			var ids []string
			if string(h.Approve) == `"all"` {
				approveAll = true
			} else if err := json.Unmarshal(h.Approve, &ids); err != nil {
				return nil, err
			}
			for _, id := range ids {
				if !skip(id) {
					approvals[id] = deferred.Approved{}
				}
			}
		}
		for id, msg := range h.Deny {
			if !skip(id) {
				approvals[id] = deferred.Denied{Message: msg}
			}
		}
		for id, args := range h.Override {
			if !skip(id) {
				approvals[id] = deferred.Approved{OverrideArgs: args}
			}
		}
		for id, r := range h.Results {
			if !skip(id) {
				res, err := resultFromScenario(r)
				if err != nil {
					return nil, err
				}
				calls[id] = res
			}
		}
		for id, m := range h.Metadata {
			if !skip(id) {
				meta[id] = m
			}
		}
		res, err := req.BuildResults(approvals, calls, meta, approveAll)
		if err != nil {
			res = &deferred.Results{Approvals: approvals, Calls: calls, Metadata: meta}
			if approveAll {
				for _, c := range req.Approvals {
					if _, ok := approvals[c.ToolCallID]; !ok {
						res.Approvals[c.ToolCallID] = deferred.Approved{}
					}
				}
			}
		}
		for id := range res.Approvals {
			w.resolved[id] = true
		}
		for id := range res.Calls {
			w.resolved[id] = true
		}
		return res, nil
	})
}

// resultFromScenario reads a RESULT through the Pydantic AI JSON form.
func resultFromScenario(r json.RawMessage) (deferred.Result, error) {
	var res deferred.Results
	b := []byte(`{"calls":{"x":` + string(pydanticResult(r)) + `}}`)
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, err
	}
	return res.Calls["x"], nil
}

func pydanticResult(r json.RawMessage) json.RawMessage {
	var forms map[string]json.RawMessage
	if json.Unmarshal(r, &forms) != nil || len(forms) != 1 {
		return r
	}
	for k, v := range forms {
		switch k {
		case "tool_return":
			var tr map[string]json.RawMessage
			if json.Unmarshal(v, &tr) != nil {
				return r
			}
			out := map[string]json.RawMessage{"kind": json.RawMessage(`"tool-return"`), "return_value": tr["value"]}
			if c, ok := tr["content"]; ok {
				out["content"] = c
			}
			if m, ok := tr["metadata"]; ok {
				out["metadata"] = m
			}
			b, _ := json.Marshal(out)
			return b
		case "model_retry":
			return json.RawMessage(`{"kind":"model-retry","message":` + string(v) + `}`)
		case "tool_failed":
			return json.RawMessage(`{"kind":"tool-failed","message":` + string(v) + `}`)
		}
	}
	return r
}

// resultsFromScenario builds Results from a RESULTS: written in Pydantic AI's
// JSON form, decoded, and round-tripped through JSON and msgpack (D34). An
// approval in a form that is not a decision is passed on as given.
func resultsFromScenario(raw json.RawMessage) (*deferred.Results, error) {
	var sc struct {
		Approvals map[string]json.RawMessage `json:"approvals"`
		Calls     map[string]json.RawMessage `json:"calls"`
		Metadata  map[string]json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &sc); err != nil {
		return nil, fmt.Errorf("results: %w", err)
	}
	wire := map[string]map[string]json.RawMessage{"approvals": {}, "calls": {}, "metadata": {}}
	for id, v := range sc.Approvals {
		var forms map[string]json.RawMessage
		wire["approvals"][id] = v
		if json.Unmarshal(v, &forms) != nil || len(forms) != 1 {
			continue
		}
		if a, ok := forms["approved"]; ok {
			var ap struct {
				OverrideArgs json.RawMessage `json:"override_args"`
			}
			if err := json.Unmarshal(a, &ap); err != nil {
				return nil, err
			}
			out := map[string]json.RawMessage{"kind": json.RawMessage(`"tool-approved"`)}
			if ap.OverrideArgs != nil {
				out["override_args"] = ap.OverrideArgs
			}
			wire["approvals"][id], _ = json.Marshal(out)
		}
		if d, ok := forms["denied"]; ok {
			wire["approvals"][id] = json.RawMessage(`{"kind":"tool-denied","message":` + string(d) + `}`)
		}
	}
	for id, v := range sc.Calls {
		wire["calls"][id] = pydanticResult(v)
	}
	for id, v := range sc.Metadata {
		wire["metadata"][id] = v
	}
	b, err := json.Marshal(wire)
	if err != nil {
		return nil, err
	}
	var res deferred.Results
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, err
	}
	if b, err = json.Marshal(res); err != nil {
		return nil, err
	}
	var viaJSON deferred.Results
	if err := json.Unmarshal(b, &viaJSON); err != nil {
		return nil, err
	}
	if b, err = msgpack.Marshal(viaJSON); err != nil {
		return nil, err
	}
	var viaMsgpack deferred.Results
	if err := msgpack.Unmarshal(b, &viaMsgpack); err != nil {
		return nil, err
	}
	return &viaMsgpack, nil
}

func roundTripRequests(r *deferred.Requests) (*deferred.Requests, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	var viaJSON deferred.Requests
	if err := json.Unmarshal(b, &viaJSON); err != nil {
		return nil, err
	}
	if b, err = msgpack.Marshal(&viaJSON); err != nil {
		return nil, err
	}
	var viaMsgpack deferred.Requests
	if err := msgpack.Unmarshal(b, &viaMsgpack); err != nil {
		return nil, err
	}
	return &viaMsgpack, nil
}

// roundTripMessages passes the stored history through JSON and msgpack, as
// the orchestrator stores it.
func roundTripMessages(msgs []agent.Message) ([]agent.Message, error) {
	if msgs == nil {
		return nil, nil
	}
	b, err := json.Marshal(msgs)
	if err != nil {
		return nil, err
	}
	var viaJSON []agent.Message
	if err := json.Unmarshal(b, &viaJSON); err != nil {
		return nil, err
	}
	if b, err = msgpack.Marshal(viaJSON); err != nil {
		return nil, err
	}
	var viaMsgpack []agent.Message
	if err := msgpack.Unmarshal(b, &viaMsgpack); err != nil {
		return nil, err
	}
	return viaMsgpack, nil
}

// messagesFromScenario turns MESSAGEs into history.
func messagesFromScenario(raw json.RawMessage) ([]agent.Message, error) {
	var msgs []map[string][]map[string]json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, err
	}
	var out []agent.Message
	for _, m := range msgs {
		for kind, parts := range m {
			msg := agent.Message{Kind: agent.MessageKind(kind)}
			for _, p := range parts {
				for k, v := range p {
					part, err := partFromScenario(k, v)
					if err != nil {
						return nil, err
					}
					msg.Parts = append(msg.Parts, part)
				}
			}
			out = append(out, msg)
		}
	}
	return out, nil
}

func partFromScenario(kind string, v json.RawMessage) (agent.Part, error) {
	var text string
	var p struct {
		Tool     string          `json:"tool"`
		ID       string          `json:"id"`
		Args     json.RawMessage `json:"args"`
		Content  json.RawMessage `json:"content"`
		Outcome  string          `json:"outcome"`
		Metadata json.RawMessage `json:"metadata"`
		Contains string          `json:"contains"`
	}
	switch kind {
	case "user", "text":
		if err := json.Unmarshal(v, &text); err != nil {
			return agent.Part{}, err
		}
		if kind == "user" {
			return agent.Part{Kind: agent.PartUserPrompt, Content: text}, nil
		}
		return agent.Part{Kind: agent.PartText, Content: text}, nil
	}
	if err := json.Unmarshal(v, &p); err != nil {
		return agent.Part{}, err
	}
	switch kind {
	case "call":
		return agent.Part{Kind: agent.PartToolCall, ToolName: p.Tool, ToolCallID: p.ID, Args: p.Args}, nil
	case "return":
		outcome := agent.Outcome(p.Outcome)
		if outcome == "" {
			outcome = agent.OutcomeSuccess
		}
		return agent.Part{Kind: agent.PartToolReturn, ToolName: p.Tool, ToolCallID: p.ID, Value: p.Content, Outcome: outcome, Metadata: p.Metadata}, nil
	case "retry":
		return agent.Part{Kind: agent.PartRetryPrompt, ToolName: p.Tool, ToolCallID: p.ID, Content: p.Contains}, nil
	}
	return agent.Part{}, fmt.Errorf("unknown part %q", kind)
}

// Comparison: actual values are written in the scenario's form, using the
// expected value only where FORMAT.md makes a check partial (retry
// "contains", return "metadata"), then compared as generic JSON.

func mustAny(raw json.RawMessage) any {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		panic(err)
	}
	return v
}

func rawAny(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return mustAny(raw)
}

func canonOutput(res *agent.RunResult) any {
	if res.Deferred == nil {
		return map[string]any{"text": res.Output}
	}
	ids := func(calls []deferred.Call) []any {
		out := []any{}
		for _, c := range calls {
			out = append(out, c.ToolCallID)
		}
		return out
	}
	meta := map[string]any{}
	for id, m := range res.Deferred.Metadata {
		meta[id] = rawAny(m)
	}
	return map[string]any{"deferred": map[string]any{
		"approvals": ids(res.Deferred.Approvals),
		"calls":     ids(res.Deferred.Calls),
		"metadata":  meta,
	}}
}

func canonMessages(wantRaw json.RawMessage, got []agent.Message) (want, gotC []any) {
	var ws []map[string]json.RawMessage
	if err := json.Unmarshal(wantRaw, &ws); err != nil {
		panic(err)
	}
	want = []any{}
	gotC = []any{}
	for _, w := range ws {
		for k, v := range w {
			parts, _ := canonParts(v, nil)
			want = append(want, map[string]any{k: parts})
		}
	}
	for i, m := range got {
		var hint json.RawMessage
		if i < len(ws) {
			hint = ws[i][string(m.Kind)]
		}
		_, parts := canonParts(hint, m.Parts)
		gotC = append(gotC, map[string]any{string(m.Kind): parts})
	}
	return want, gotC
}

func canonParts(wantRaw json.RawMessage, got []agent.Part) (want, gotC []any) {
	var ws []map[string]json.RawMessage
	if wantRaw != nil {
		if err := json.Unmarshal(wantRaw, &ws); err != nil {
			panic(err)
		}
	}
	want = []any{}
	gotC = []any{}
	for _, w := range ws {
		wm := map[string]any{}
		for k, v := range w {
			x := mustAny(v)
			if k == "return" {
				if o, ok := x.(map[string]any); ok {
					if _, has := o["outcome"]; !has {
						o["outcome"] = "success"
					}
				}
			}
			wm[k] = x
		}
		want = append(want, wm)
	}
	for i, p := range got {
		var hint map[string]any
		if i < len(ws) {
			for _, v := range ws[i] {
				hint, _ = mustAny(v).(map[string]any)
			}
		}
		gotC = append(gotC, canonPart(p, hint))
	}
	return want, gotC
}

func canonPart(p agent.Part, hint map[string]any) any {
	switch p.Kind {
	case agent.PartUserPrompt:
		return map[string]any{"user": p.Content}
	case agent.PartText:
		return map[string]any{"text": p.Content}
	case agent.PartToolCall:
		return map[string]any{"call": map[string]any{"tool": p.ToolName, "id": p.ToolCallID, "args": rawAny(p.Args)}}
	case agent.PartToolReturn:
		r := map[string]any{"tool": p.ToolName, "id": p.ToolCallID, "content": rawAny(p.Value), "outcome": string(p.Outcome)}
		if _, ok := hint["metadata"]; ok {
			r["metadata"] = rawAny(p.Metadata)
		}
		return map[string]any{"return": r}
	case agent.PartRetryPrompt:
		r := map[string]any{"tool": p.ToolName, "id": p.ToolCallID}
		if c, ok := hint["contains"].(string); ok {
			if strings.Contains(p.Content, c) {
				r["contains"] = c
			} else {
				r["contains"] = p.Content
			}
		}
		return map[string]any{"retry": r}
	}
	return map[string]any{string(p.Kind): p.Content}
}

func canonExecutions(wantRaw json.RawMessage, got []*execution) (want, gotC []any) {
	var ws []map[string]json.RawMessage
	if err := json.Unmarshal(wantRaw, &ws); err != nil {
		panic(err)
	}
	want = []any{}
	gotC = []any{}
	for _, w := range ws {
		wm := map[string]any{}
		for k, v := range w {
			wm[k] = mustAny(v)
		}
		want = append(want, wm)
	}
	for i, e := range got {
		g := map[string]any{"tool": e.tool, "args": rawAny(e.args), "approved": e.approved}
		if i < len(ws) {
			if _, ok := ws[i]["metadata"]; ok {
				g["metadata"] = rawAny(e.metadata)
			}
		}
		gotC = append(gotC, g)
	}
	return want, gotC
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return cmp.Equal(x, y)
}
