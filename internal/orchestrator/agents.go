package orchestrator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/deferred"
	"github.com/toolgate/toolgate/internal/telemetry/modeltel"
	"github.com/toolgate/toolgate/wire"
)

// roster knows the agents this replica runs and those the other replicas
// run: which conversations this replica may take (agents.go).
type roster struct {
	rosterParams
	// inline is the runner's inline wait, the handler of the agents whose
	// config sets inline_wait.
	inline func(rc *agent.RunContext, req *deferred.Requests, wait time.Duration) (*deferred.Results, error)
	// agents are the agents this replica runs, by name; names in
	// configured order; def the first.
	agents map[string]*agentRuntime
	names  []string
	def    *agentRuntime
	// replicas is the view of the live replicas' adverts (replicaLink
	// keeps it).
	replicas replicaSet
}

// rosterParams are the roster's collaborators: the config its agents are
// built from, the clock, the tools' discovery, the once-a-key log.
type rosterParams struct {
	cfg       Config
	clock     func() time.Time
	discovery *discovery
	once      *onceLog
}

// agentRuntime is one agent this replica runs: its config, the digest of
// that config, and the agent built from it.
type agentRuntime struct {
	name   string
	digest string
	cfg    *AgentConfig
	agent  *agent.Agent
	policy agentPolicy
}

// AgentDigest is the SHA-256 (hex) of the canonical JSON of what in an
// agent config changes how its conversations go on: the model (provider,
// name, endpoint, streaming, a script model's responses), the instructions,
// inline_wait, max_model_requests, the tools with their schemas, approval
// rules, approval metadata and deadlines, and the discover: entries. Left
// out are the name (it is the agent's identity, not its behaviour) and
// model.api_key_env (rotating the variable that holds the key changes
// nothing a conversation sees). Canonical: object keys sorted at every
// level, no insignificant whitespace, so that the same config written in
// YAML or JSON, in any key order, has the same digest.
func AgentDigest(c *AgentConfig) string {
	cp := *c
	cp.Name = ""
	cp.Model.APIKeyEnv = ""
	type withScript struct {
		AgentConfig
		Script []agent.ScriptResponse `json:"script_responses,omitempty"`
	}
	raw, err := json.Marshal(withScript{AgentConfig: cp, Script: c.Script})
	if err != nil {
		// Every field marshals (it was decoded from JSON); a config that
		// does not is not one any replica can match.
		return "unmarshalable:" + err.Error()
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "unmarshalable:" + err.Error()
	}
	canon, _ := json.Marshal(v) // encoding/json sorts map keys
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}

// ShortDigest is the first 12 hex digits of a digest, for logs and errors.
func ShortDigest(d string) string {
	if len(d) > 12 {
		return d[:12]
	}
	return d
}

// buildAgents builds every configured agent.
func (r *roster) buildAgents() error {
	r.agents = map[string]*agentRuntime{}
	for _, cfg := range r.cfg.agentList() {
		cfg = withDefaults(cfg, r.cfg.TrustedApprovers, r.cfg.Retention)
		pol, err := compilePolicy(cfg)
		if err != nil {
			return fmt.Errorf("agent %s: %w", agentName(cfg), err)
		}
		a, err := r.buildAgent(cfg)
		if err != nil {
			return fmt.Errorf("agent %s: %w", agentName(cfg), err)
		}
		rt := &agentRuntime{name: agentName(cfg), digest: AgentDigest(cfg), cfg: cfg, agent: a, policy: pol}
		r.agents[rt.name] = rt
		r.names = append(r.names, rt.name)
		if r.def == nil {
			r.def = rt
		}
	}
	return nil
}

// buildAgent turns the agent config into an agent: its configured tools,
// and, with discover: entries, the tools workers advertise that match them,
// taken from the catalogue at the start of each run (discoveredToolset).
func (r *roster) buildAgent(cfg *AgentConfig) (*agent.Agent, error) {
	model := r.cfg.Model
	if model == nil {
		if cfg.ModelFunc == nil {
			return nil, errors.New("agent config has no model: set Config.Model, or read the config with package agentconfig")
		}
		m, err := cfg.ModelFunc(r.cfg.LookupEnv, r.cfg.Logger)
		if err != nil {
			return nil, err
		}
		model = m
	}
	model = modeltel.Wrap(model, modeltel.Config{Metrics: r.cfg.Metrics, TracerProvider: r.cfg.TracerProvider})
	tools := make([]agent.Tool, 0, len(cfg.Tools))
	for i := range cfg.Tools {
		t, err := r.discovery.newTool(agentName(cfg), &cfg.Tools[i])
		if err != nil {
			return nil, fmt.Errorf("tools[%d] (%s): %w", i, cfg.Tools[i].Name, err)
		}
		tools = append(tools, t)
	}
	tools = append(tools, r.cfg.Tools...)
	// The run's discovered tools and its frontend's (runTools).
	toolsets := []agent.Toolset{r.discovery.toolset(agentName(cfg))}
	var handlers []agent.Handler
	if cfg.InlineWait > 0 {
		wait := cfg.InlineWait.D()
		handlers = append(handlers, agent.HandlerFunc(func(rc *agent.RunContext, req *deferred.Requests) (*deferred.Results, error) {
			return r.inline(rc, req, wait)
		}))
	}
	handlers = append(handlers, r.cfg.Handlers...)
	a, err := agent.New(agent.Config{
		Model:            model,
		Instructions:     cfg.Instructions,
		Tools:            tools,
		Toolsets:         toolsets,
		Handlers:         handlers,
		AllowDeferred:    true,
		MaxModelRequests: cfg.MaxModelRequests,
		Logger:           r.cfg.Logger,
		Clock:            func() time.Time { return r.clock().UTC() },
	})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return a, nil
}

// config is a's agent config; nil for no agent.
func (a *agentRuntime) config() *AgentConfig {
	if a == nil {
		return nil
	}
	return a.cfg
}

// agentOf is the agent of this replica that conversation c names; nil when
// this replica does not run it. A conversation that names none (stored
// before conversations recorded their agent) is the default agent's.
func (r *roster) agentOf(c *conversation.State) *agentRuntime {
	if c.Agent == "" {
		return r.def
	}
	return r.agents[c.Agent]
}

// mayRun reports whether this replica runs c's runs: it has c's agent with
// the digest c records, or with another digest that no live replica
// advertises (the upgrade rule: the config of that name changed and no
// replica with the old one is left, so the new config adopts it rather
// than leave it stranded). When it may not, why says so, for the log
// (logged once per agent and digest).
func (r *roster) mayRun(c *conversation.State) (ok, adopt bool) {
	a := r.agentOf(c)
	if a == nil {
		r.leaveAlone(c, "this replica does not run the agent")
		return false, false
	}
	if c.AgentDigest == "" || c.AgentDigest == a.digest {
		return true, false
	}
	if r.replicas.serves(c.Agent, c.AgentDigest, r.clock()) {
		r.leaveAlone(c, "a replica with the conversation's config of the agent runs it")
		return false, false
	}
	return true, true
}

// leaveAlone logs once per agent and digest that this replica leaves a
// conversation to others.
func (r *roster) leaveAlone(c *conversation.State, why string) {
	key := "leave:" + c.Agent + ":" + c.AgentDigest
	r.once.warn(key, "conversations of this agent left to other replicas", slog.String("agent", c.Agent),
		slog.String("agent_digest", ShortDigest(c.AgentDigest)), slog.String("reason", why), slog.String("conversation_id", c.ID))
}

// UnknownAgentError says a start named an agent no replica runs, or named
// none where there are several.
type UnknownAgentError struct {
	Agent string
	// Choices are the agents a start may name: this replica's and those
	// live replicas advertise.
	Choices []string
}

func (e *UnknownAgentError) Error() string {
	if e.Agent == "" {
		return fmt.Sprintf("agent: required, there are several (%s)", strings.Join(e.Choices, ", "))
	}
	return fmt.Sprintf("agent: no replica runs an agent named %q (agents: %s)", e.Agent, strings.Join(e.Choices, ", "))
}

// AgentMismatchError says a prompt for an existing conversation named
// another agent than the conversation's.
type AgentMismatchError struct {
	ConversationID, Agent, Want string
}

func (e *AgentMismatchError) Error() string {
	return fmt.Sprintf("conversation %s runs with agent %q, not %q: a conversation keeps its agent (leave agent out, or start a new conversation)", e.ConversationID, e.Want, e.Agent)
}

// startAgent picks the agent of a new conversation: the named one, else
// the only one there is. local is nil when this replica does not run it
// but a live replica does (the conversation is then handed over).
func (r *roster) startAgent(name string) (local *agentRuntime, chosen, digest string, err error) {
	now := r.clock()
	if name == "" {
		all := r.allAgents(now)
		if len(all) > 1 {
			return nil, "", "", &UnknownAgentError{Choices: all}
		}
		return r.def, r.def.name, r.def.digest, nil
	}
	if a := r.agents[name]; a != nil {
		return a, a.name, a.digest, nil
	}
	if d := r.replicas.digestOf(name, now); d != "" {
		return nil, name, d, nil
	}
	return nil, "", "", &UnknownAgentError{Agent: name, Choices: r.allAgents(now)}
}

// allAgents lists this replica's agents and those live replicas advertise,
// sorted.
func (r *roster) allAgents(now time.Time) []string {
	names := slices.Clone(r.names)
	for _, n := range r.replicas.names(now) {
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// runnable is the agent of this replica that runs c as c records it (its
// digest, or none recorded yet); nil when this replica must not run c.
func (r *roster) runnable(c *conversation.State) *agentRuntime {
	a := r.agentOf(c)
	if a == nil || (c.AgentDigest != "" && c.AgentDigest != a.digest) {
		return nil
	}
	return a
}

// take records, in a transition that gives this replica a run of c, the
// agent it runs it with; false when it may not (mayRun).
func (r *roster) take(c *conversation.State) bool {
	ok, _ := r.mayRun(c)
	if !ok {
		return false
	}
	a := r.agentOf(c)
	if a.name != c.Agent || a.digest != c.AgentDigest || c.Unserved != "" {
		c.SetAgent(a.name, a.digest)
	}
	c.Signed = c.Signed || a.policy.signed()
	return true
}

// judge is the agent of this replica whose policy decides c's decisions:
// the one that runs c as c records it, or, once no live replica advertises
// c's config, the one that adopts it (the upgrade rule), unless c took
// only signed decisions and that one's config takes unsigned ones. Nil
// when this replica may not judge them: they are left to the replicas that
// may (policy.go).
func (r *roster) judge(c *conversation.State) *agentRuntime {
	if a := r.runnable(c); a != nil {
		return a
	}
	a := r.agentOf(c)
	if a == nil || r.replicas.serves(c.Agent, c.AgentDigest, r.clock()) {
		return nil
	}
	if c.Signed && !a.policy.signed() {
		return nil
	}
	return a
}

// agentNameOf is the name of c's agent (the default agent's for a
// conversation stored before conversations recorded one).
func (r *roster) agentNameOf(c *conversation.State) string {
	if c.Agent == "" {
		return r.def.name
	}
	return c.Agent
}

// approversFor is approversOf for call pc of c as this replica's config of
// c's agent has it.
func (r *roster) approversFor(c *conversation.State, pc *conversation.PendingCall) []string {
	ag := r.judge(c)
	if ag == nil {
		return nil
	}
	return ag.policy.approversOf(ag.cfg.tool(pc.ToolName), pc)
}

// withApproversRule puts in req, the approval request of call pc of c, its
// tool's approvers rule and the roles it reads, as this replica's config
// of c's agent has them, so that approvers evaluate the rule over
// themselves (approver.Admit).
func (r *roster) withApproversRule(c *conversation.State, pc *conversation.PendingCall, req *wire.ApprovalRequest) {
	ag := r.judge(c)
	if ag == nil {
		return
	}
	if tc := ag.cfg.tool(pc.ToolName); tc != nil && tc.Approvers.Rule != "" {
		req.ApproversRule, req.Roles = tc.Approvers.Rule, ag.policy.roles
	}
}

// mayNotApprove lists who may not approve call pc of c, as check refuses
// it with this replica's config of c's agent: the run's caller, unless the
// tool allows self-approval.
func (r *roster) mayNotApprove(c *conversation.State, pc *conversation.PendingCall) []string {
	ag := r.judge(c)
	if ag == nil {
		return nil
	}
	tc := ag.cfg.tool(pc.ToolName)
	if tc == nil || tc.SelfApproval == SelfApprovalAllow {
		return nil
	}
	if who := CallerID(c.Caller); who != "" {
		return []string{who}
	}
	return nil
}
