package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"sync"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
)

// discovered is the tool the agent offers for an advertised one: the first
// discover: entry that matches its name gives the approval rule and the
// deadlines, the advert the description and the args schema. nil when no
// entry matches, when tools: lists the name (the configured tool wins), or
// when the advert cannot be offered (why says so).
func (c *AgentConfig) discovered(t AdvertisedTool) (tc *ToolConfig, why string) {
	name := t.Advert.Name
	if c.tool(name) != nil {
		return nil, ""
	}
	i := slices.IndexFunc(c.Discover, func(d DiscoverConfig) bool {
		ok, _ := path.Match(d.Tools, name)
		return ok
	})
	if i < 0 {
		return nil, ""
	}
	d := &c.Discover[i]
	if !toolNameRE.MatchString(name) {
		return nil, "the name is not one a model can call (letters, digits, _ and -, at most 64)"
	}
	params := t.Advert.Parameters
	if len(params) == 0 || string(params) == "null" {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	var schema map[string]any
	if err := json.Unmarshal(params, &schema); err != nil {
		return nil, "its parameters are not a JSON Schema object"
	}
	if typ, ok := schema["type"]; ok && typ != "object" {
		return nil, fmt.Sprintf("its args schema has type %v, not \"object\"", typ)
	}
	return &ToolConfig{
		Name: name, Description: t.Advert.Description, Parameters: params,
		Approval: d.Approval, ApprovalMetadata: d.ApprovalMetadata,
		Deadline: d.Deadline, CallDeadline: d.CallDeadline,
		Rule: d.Rule, digest: t.Digest, mcpServer: t.Advert.MCPServer,
	}, ""
}

// discovery is what the orchestrator knows of the tools workers
// advertise: the catalogue, each executing run's snapshot of it, the agent
// tools built for discovered ones, and the warnings about tools no worker
// advertises.
type discovery struct {
	log *slog.Logger
	// inProcess are Config.Tools: a tool of such a name is the agent's,
	// never a discovered one.
	inProcess []agent.Tool
	// agents are the configured agents, in order.
	agents   []*AgentConfig
	once     *onceLog
	warnings advertWarnings

	// catalogue holds the tools workers advertise (nil until watch);
	// runTools the tools of each run executing here, by run id;
	// builtTools the agent's tools made for discovered ones, by agent,
	// name and schema digest.
	catalogue  *Catalogue
	runTools   sync.Map
	builtTools sync.Map
	stopWatch  context.CancelFunc
	watchDone  chan struct{}
}

// runTools are the tools of one run: the configured ones and those
// discovered when it started. The run offers exactly these to the model,
// and its deferred calls take their deadlines, approval metadata and schema
// digest from them.
type runTools struct {
	configured *AgentConfig
	discovered map[string]*ToolConfig
	names      []string // of discovered, sorted: the order the model sees
}

func (rt *runTools) tool(name string) *ToolConfig {
	if t := rt.configured.tool(name); t != nil {
		return t
	}
	return rt.discovered[name]
}

// toolsForRun takes the run's snapshot of the catalogue.
func (d *discovery) toolsForRun(cfg *AgentConfig) *runTools {
	rt := &runTools{configured: cfg}
	if len(cfg.Discover) == 0 || d.catalogue == nil {
		return rt
	}
	rt.discovered = map[string]*ToolConfig{}
	for name, t := range d.catalogue.Snapshot() {
		if slices.ContainsFunc(d.inProcess, func(g agent.Tool) bool { return g.Name() == name }) {
			continue // an in-process tool of that name is the agent's
		}
		tc, why := cfg.discovered(t)
		if why != "" {
			d.once.warn("discover:"+name+":"+t.Digest, "advertised tool not offered", slog.String("tool", name), slog.String("reason", why))
		}
		if tc != nil {
			rt.discovered[name] = tc
			rt.names = append(rt.names, name)
		}
	}
	slices.Sort(rt.names)
	return rt
}

// toolOf is the tool a deferred call of runID was made with: from the
// run's snapshot while the run goes on, else as the tool is now in the
// agent config cfg (nil when this replica does not run the conversation's
// agent: the tool is then unknown here).
func (d *discovery) toolOf(cfg *AgentConfig, runID, name string) *ToolConfig {
	if v, ok := d.runTools.Load(runID); ok {
		return v.(*runTools).tool(name)
	}
	if cfg == nil {
		return nil
	}
	return d.toolsNow(cfg, name)
}

// toolsNow resolves a tool as agent cfg would offer it to a run starting
// now.
func (d *discovery) toolsNow(cfg *AgentConfig, name string) *ToolConfig {
	if t := cfg.tool(name); t != nil {
		return t
	}
	if d.catalogue == nil {
		return nil
	}
	a, ok := d.catalogue.Lookup(name)
	if !ok {
		return nil
	}
	tc, _ := cfg.discovered(a)
	return tc
}

type runToolsKey struct{}

// toolset offers a run the discovered tools of its snapshot
// (runToolsKey in its context). Built tools are kept per name and schema
// digest, so a schema is compiled once, not at every run.
//
// The key holds the agent's name too: two agents may give the same tool
// different approval rules.
func (d *discovery) toolset(forAgent string) agent.Toolset {
	return agent.ToolsetFunc(func(ctx context.Context) ([]agent.Tool, error) {
		rt, _ := ctx.Value(runToolsKey{}).(*runTools)
		if rt == nil {
			return nil, nil
		}
		tools := make([]agent.Tool, 0, len(rt.names))
		for _, name := range rt.names {
			tc := rt.discovered[name]
			key := forAgent + "\x00" + name + "\x00" + tc.digest
			if t, ok := d.builtTools.Load(key); ok {
				tools = append(tools, t.(agent.Tool))
				continue
			}
			t, err := d.newTool(forAgent, tc)
			if err != nil {
				// The advert's schema does not compile: the tool is left
				// out, not the run failed.
				d.once.warn("schema:"+key, "advertised tool not offered", slog.String("tool", name), slog.String("reason", err.Error()))
				continue
			}
			if tc.Executor != ExecutorFrontend {
				// A frontend's tools come and go with its conversations.
				d.builtTools.Store(key, t)
			}
			tools = append(tools, t)
		}
		return tools, nil
	})
}

// newTool makes the agent's tool for a configured or discovered tool. Its
// body defers every call as external (CallDeferred); before that, the
// tool's approval rule may defer it for a decision (ApprovalRequired, with
// the tool's approval_metadata as the batch metadata, D2/D8); once
// approved, the body runs again and defers it as an external call (D23,
// D26). Args are validated against the schema before either (D3, D5).
func (d *discovery) newTool(forAgent string, tc *ToolConfig) (agent.Tool, error) {
	def := agent.ToolDef{Name: tc.Name, Description: tc.Description, Parameters: tc.Parameters}
	return agent.NewRawTool(def, func(rc *agent.RunContext, args json.RawMessage) (any, error) {
		if !rc.ToolCallApproved && d.approvalRequired(rc, forAgent, tc, args) {
			return nil, deferred.ApprovalRequired(tc.ApprovalMetadata)
		}
		return nil, deferred.CallDeferred(nil)
	}, agent.WithoutEffects())
}

// staleApprovals turns the approvals of a resumed batch whose tool changed
// (another args schema) or went away since the call was made into
// denials the model reads: the call was approved as it was made against
// the old tool, and the new one must not take it silently. Results of
// external calls stand: the worker has answered them.
func staleApprovals(b *conversation.Batch, rt *runTools, res *deferred.Results) {
	for _, pc := range b.Calls {
		if pc.SchemaDigest == "" || pc.Kind != deferred.KindApproval {
			continue
		}
		if _, ok := res.Approvals[pc.ToolCallID].(deferred.Approved); !ok {
			continue
		}
		if t := rt.tool(pc.ToolName); t != nil && t.digest == pc.SchemaDigest {
			continue
		}
		res.Approvals[pc.ToolCallID] = deferred.Denied{Message: ToolChangedMessage(pc.ToolName)}
	}
}

// ToolChangedMessage is what the model reads for an approved call whose
// tool changed or went away before the call could go to a worker.
func ToolChangedMessage(tool string) string {
	return fmt.Sprintf("tool %s changed since the call was made (its args schema is not the one the call was made against, or no worker offers it now); the call was not run: call the tool again if it is still needed", tool)
}

// watch fills the catalogue from KV toolgate_tools for as long as the
// orchestrator runs (until stop), and waits (within ctx) until it holds
// what is advertised now, so that the first runs see it. Without the
// bucket the orchestrator runs on: its configured tools need no adverts.
func (d *discovery) watch(ctx context.Context, b *bus.Bus) {
	kv, err := b.Tools(ctx)
	if err != nil {
		d.log.WarnContext(ctx, "tool adverts not watched: discover: finds nothing and missing workers are not reported", slog.String("error", err.Error()))
		return
	}
	d.catalogue = newCatalogue(d.log, d.advertChanged)
	wctx, cancel := context.WithCancel(context.Background())
	d.stopWatch, d.watchDone = cancel, make(chan struct{})
	go func() {
		defer close(d.watchDone)
		d.catalogue.run(wctx, kv)
	}()
	select {
	case <-d.catalogue.CaughtUp():
	case <-ctx.Done():
	}
}

// stop ends watch's goroutine and waits for it.
func (d *discovery) stop() {
	d.warnings.stop()
	if d.stopWatch != nil {
		d.stopWatch()
		<-d.watchDone
	}
}

// advertChanged warns about tools the agent uses that no worker
// advertises: every configured tool once the catalogue has caught up, then
// each tool whose advert goes away (a configured one, or one that a
// discover: entry matches).
//
// With several agents a tool is checked once, as configured if any agent
// configures it, else as discovered if any agent's discover: matches it.
func (d *discovery) advertChanged(name string, t *AdvertisedTool, caughtUp bool) {
	if caughtUp {
		checked := map[string]bool{}
		for _, cfg := range d.agents {
			for _, tc := range cfg.Tools {
				if checked[tc.Name] {
					continue
				}
				checked[tc.Name] = true
				_, ok := d.catalogue.Lookup(tc.Name)
				d.warnings.checkAtStart(tc.Name, ok, "configured")
			}
		}
		return
	}
	select {
	case <-d.catalogue.CaughtUp():
	default:
		return // the first catch-up checks every tool at once
	}
	discovered := false
	for _, cfg := range d.agents {
		if cfg.tool(name) != nil {
			d.warnings.check(name, t != nil, "configured")
			return
		}
		discovered = discovered || slices.ContainsFunc(cfg.Discover, func(d DiscoverConfig) bool { ok, _ := path.Match(d.Tools, name); return ok })
	}
	if discovered {
		d.warnings.check(name, t != nil, "discovered")
	}
}

// onceLog logs a warning once per key for the life of the orchestrator.
type onceLog struct {
	log  *slog.Logger
	seen sync.Map
}

func (l *onceLog) warn(key, msg string, attrs ...any) {
	if _, loaded := l.seen.LoadOrStore(key, true); !loaded {
		l.log.Warn(msg, attrs...)
	}
}

// approvalRequired applies the tool's approval rule. It fails closed: a
// rule that cannot be evaluated requires approval, and the reason is
// logged.
func (d *discovery) approvalRequired(rc *agent.RunContext, forAgent string, tc *ToolConfig, args json.RawMessage) bool {
	if tc.Rule == nil {
		return false
	}
	var (
		need bool
		err  error
	)
	if cr, ok := tc.Rule.(ContextRule); ok {
		need, err = cr.RequiredIn(tc.Name, args, ruleContext(rc, forAgent, tc))
	} else {
		need, err = tc.Rule.Required(tc.Name, args)
	}
	if err != nil {
		d.log.WarnContext(rc.Context(), "approval rule failed; approval required", slog.String("tool", tc.Name),
			slog.String("run_id", rc.RunID), slog.String("tool_call_id", rc.ToolCallID), slog.String("error", err.Error()))
		return true
	}
	return need
}
