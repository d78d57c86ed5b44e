package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
)

func advertised(t *testing.T, name, params string) AdvertisedTool {
	t.Helper()
	a := bus.ToolAdvert{Name: name, Description: "d " + name, Parameters: json.RawMessage(params), Kind: "call", Executor: "mcp", MCPServer: "srv", WorkerID: "w", At: time.Now()}
	d, err := SchemaDigest(a.Parameters)
	if err != nil {
		t.Fatal(err)
	}
	return AdvertisedTool{Advert: a, Digest: d}
}

// testRule is an approval rule that names itself, so that a test can tell
// which entry's rule a tool took.
type testRule struct{ name string }

func (r testRule) Required(string, json.RawMessage) (bool, error) { return true, nil }

// discoverConfig is, as package agentconfig reads it:
//
//	tools:
//	  - name: get-listed
//	    description: the configured one
//	discover:
//	  - tools: "get-*"
//	    approval: always
//	    approval_metadata: {reason: "touches money"}
//	    deadline: 2m
//	  - tools: "*"
//	    approval: args.n > 3
//	    call_deadline: 10s
func discoverConfig() *AgentConfig {
	return &AgentConfig{
		Model: ModelConfig{Provider: "test"},
		Tools: []ToolConfig{{Name: "get-listed", Description: "the configured one", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}},
		Discover: []DiscoverConfig{
			{Tools: "get-*", Approval: "always", ApprovalMetadata: json.RawMessage(`{"reason":"touches money"}`), Deadline: Duration(2 * time.Minute), Rule: testRule{"always"}},
			{Tools: "*", Approval: "args.n > 3", CallDeadline: Duration(10 * time.Second), Rule: testRule{"args.n > 3"}},
		},
	}
}

// The first matching entry decides; a tool under tools: is the configured
// one; the advert gives description, schema and digest.
func TestDiscoveredFirstMatchWins(t *testing.T) {
	t.Parallel()
	cfg := discoverConfig()
	get := advertised(t, "get-sum", `{"type":"object","properties":{"a":{"type":"number"}}}`)
	tc, why := cfg.discovered(get)
	if tc == nil || why != "" {
		t.Fatalf("get-sum not offered: %s", why)
	}
	if tc.Approval != "always" || tc.Rule != (testRule{"always"}) || string(tc.ApprovalMetadata) != `{"reason":"touches money"}` || tc.deadline(true) != 2*time.Minute ||
		tc.Description != "d get-sum" || string(tc.Parameters) != string(get.Advert.Parameters) || tc.digest != get.Digest || tc.mcpServer != "srv" {
		t.Errorf("get-sum = %+v", tc)
	}
	other, _ := cfg.discovered(advertised(t, "echo", ""))
	if other == nil || other.Approval != "args.n > 3" || other.deadline(false) != 10*time.Second || other.deadline(true) != DefaultApprovalDeadline {
		t.Fatalf("echo = %+v", other)
	}
	if string(other.Parameters) != `{"type":"object","properties":{}}` {
		t.Errorf("echo without a schema gets %s", other.Parameters)
	}
	if other.Rule != (testRule{"args.n > 3"}) {
		t.Errorf("echo has the rule %v, want the second entry's", other.Rule)
	}
	if tc, _ := cfg.discovered(advertised(t, "get-listed", "")); tc != nil {
		t.Errorf("a tool under tools: is discovered too: %+v", tc)
	}
	if tc, why := cfg.discovered(advertised(t, "has space", "")); tc != nil || !strings.Contains(why, "not one a model can call") {
		t.Errorf("bad name: %+v, %q", tc, why)
	}
	if tc, why := cfg.discovered(advertised(t, "listy", `{"type":"array"}`)); tc != nil || !strings.Contains(why, `not "object"`) {
		t.Errorf("array schema: %+v, %q", tc, why)
	}
	only := &AgentConfig{Model: ModelConfig{Provider: "test"}, Discover: []DiscoverConfig{{Tools: "get-*"}}}
	if tc, why := only.discovered(advertised(t, "put", "")); tc != nil || why != "" {
		t.Errorf("a name no entry matches: %+v, %q", tc, why)
	}
}

// An approved call whose tool changed or went away reads a denial; one whose
// tool is unchanged, a denied one and an external call's result stand.
func TestStaleApprovals(t *testing.T) {
	t.Parallel()
	cfg := discoverConfig()
	same, _ := cfg.discovered(advertised(t, "same", ""))
	changed, _ := cfg.discovered(advertised(t, "changed", `{"type":"object","properties":{"x":{}}}`))
	rt := &runTools{configured: cfg, discovered: map[string]*ToolConfig{"same": same, "changed": changed}}
	old := advertised(t, "x", `{"type":"object","properties":{"y":{}}}`).Digest
	b := &conversation.Batch{Calls: []*conversation.PendingCall{
		{ToolCallID: "a1", ToolName: "same", Kind: deferred.KindApproval, SchemaDigest: same.digest},
		{ToolCallID: "a2", ToolName: "changed", Kind: deferred.KindApproval, SchemaDigest: old},
		{ToolCallID: "a3", ToolName: "gone", Kind: deferred.KindApproval, SchemaDigest: old},
		{ToolCallID: "a4", ToolName: "changed", Kind: deferred.KindApproval, SchemaDigest: old},
		{ToolCallID: "a5", ToolName: "get-listed", Kind: deferred.KindApproval},
		{ToolCallID: "c1", ToolName: "changed", Kind: deferred.KindCall, SchemaDigest: old},
	}}
	res := deferred.Results{
		Approvals: map[string]deferred.Decision{"a1": deferred.Approved{}, "a2": deferred.Approved{}, "a3": deferred.Approved{}, "a4": deferred.Denied{Message: "no"}, "a5": deferred.Approved{}},
		Calls:     map[string]deferred.Result{"c1": deferred.Value{Value: json.RawMessage(`1`)}},
	}
	staleApprovals(b, rt, &res)
	for id, want := range map[string]deferred.Decision{
		"a1": deferred.Approved{}, "a2": deferred.Denied{Message: ToolChangedMessage("changed")},
		"a3": deferred.Denied{Message: ToolChangedMessage("gone")}, "a4": deferred.Denied{Message: "no"}, "a5": deferred.Approved{},
	} {
		if got := res.Approvals[id]; !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %#v, want %#v", id, got, want)
		}
	}
	if got := res.Calls["c1"]; string(got.(deferred.Value).Value) != "1" {
		t.Errorf("c1 = %#v", got)
	}
}

// The warning about an unadvertised tool comes once per change.
func TestAdvertWarningsOncePerChange(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := advertWarnings{log: slog.New(slog.NewTextHandler(&buf, nil))}
	w.check("a", false, "configured")
	w.check("a", false, "configured")
	w.check("b", true, "configured")
	if n := strings.Count(buf.String(), "no worker advertises tool"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, buf.String())
	}
	w.check("a", true, "configured")
	w.check("a", false, "discovered")
	if n := strings.Count(buf.String(), "tool=a"); n != 2 {
		t.Errorf("%d warnings about a, want 2 (it came back and went again):\n%s", n, buf.String())
	}
}

// With several agents, discovery is per agent: the same advertised tool is
// offered by each agent whose discover: matches it, with that agent's
// approval rule (the built tools are kept per agent), and not by an agent
// whose entries do not match; a call's tool resolves in its agent.
func TestDiscoveryPerAgent(t *testing.T) {
	t.Parallel()
	// As package agentconfig reads "name: strict\nmodel: {provider: test}\n
	// discover:\n  - tools: \"get-*\"\n    approval: always\n" and the like.
	agentCfg := func(name, glob, approval string, rule ApprovalRule) *AgentConfig {
		return &AgentConfig{Name: name, Model: ModelConfig{Provider: "test"},
			Discover:  []DiscoverConfig{{Tools: glob, Approval: approval, Rule: rule}},
			ModelFunc: func(func(string) (string, bool), *slog.Logger) (agent.Model, error) { return agent.NewTestModel(), nil }}
	}
	strict := agentCfg("strict", "get-*", "always", testRule{"always"})
	lax := agentCfg("lax", "get-*", "", nil)
	other := agentCfg("other", "put-*", "", nil)
	o, err := New(Config{Bus: &bus.Bus{}, Agents: []*AgentConfig{strict, lax, other}})
	if err != nil {
		t.Fatal(err)
	}
	o.discovery.catalogue = newCatalogue(o.log, nil)
	o.discovery.catalogue.tools["get-sum"] = advertised(t, "get-sum", `{"type":"object"}`)

	for name, wantApproval := range map[string]string{"strict": "always", "lax": ""} {
		rt := o.discovery.toolsForRun(o.roster.agents[name].cfg)
		tc := rt.tool("get-sum")
		if tc == nil || tc.Approval != wantApproval {
			t.Errorf("%s offers get-sum as %+v, want approval %q", name, tc, wantApproval)
		}
		if got := o.discovery.toolOf(o.roster.agents[name].config(), "no-run", "get-sum"); got == nil || got.Approval != wantApproval {
			t.Errorf("%s resolves get-sum now as %+v", name, got)
		}
		ctx := context.WithValue(context.Background(), runToolsKey{}, rt)
		tools, err := o.discovery.toolset(name).Tools(ctx)
		if err != nil || len(tools) != 1 {
			t.Fatalf("%s: %d tools, %v", name, len(tools), err)
		}
	}
	var built []string
	o.discovery.builtTools.Range(func(k, _ any) bool { built = append(built, strings.Split(k.(string), "\x00")[0]); return true })
	slices.Sort(built)
	if !slices.Equal(built, []string{"lax", "strict"}) {
		t.Errorf("built tools kept for agents %v, want one per agent", built)
	}
	if rt := o.discovery.toolsForRun(o.roster.agents["other"].cfg); rt.tool("get-sum") != nil {
		t.Error("an agent whose discover: does not match offers get-sum")
	}
}
