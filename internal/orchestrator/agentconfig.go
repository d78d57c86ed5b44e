package orchestrator

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/wire"
)

// Default deadlines of a deferred call, when its tool sets none.
const (
	DefaultApprovalDeadline = 10 * time.Minute
	DefaultCallDeadline     = 5 * time.Minute
)

// AgentConfig describes the agent the orchestrator runs: its model, its
// instructions and its tools. Every tool is executed by a tool-worker; an
// approval rule decides which calls first need a decision. Package
// agentconfig reads one from a file, checks it and compiles its rules; the
// engine takes it as it is.
type AgentConfig struct {
	// Name names the agent (POST /v1/runs {"agent"}); loaded from a file
	// without one, it is the file's base name.
	Name         string      `json:"name,omitempty"`
	Model        ModelConfig `json:"model"`
	Instructions string      `json:"instructions,omitempty"`
	// InlineWait is how long a run waits, inside the run, for the replies of
	// its deferred calls before it pauses. Zero (the default) pauses at once.
	InlineWait Duration `json:"inline_wait,omitempty"`
	// MaxModelRequests bounds the model calls of one run. Zero means the
	// agent's default.
	MaxModelRequests int          `json:"max_model_requests,omitempty"`
	Tools            []ToolConfig `json:"tools,omitempty"`
	// Discover offers the model the tools workers advertise whose names
	// match an entry (the first that matches decides); a tool listed under
	// Tools is the configured one.
	Discover []DiscoverConfig `json:"discover,omitempty"`
	// Trust maps approver names to their base64 ed25519 public keys. When
	// not empty, a decision from NATS counts only if it is signed by the
	// key of the approver it names, and one over HTTP only from a user the
	// API names (D36). Nil takes Config.TrustedApprovers (the
	// orchestrator's --trust-approver); an empty map trusts no key even on
	// a replica given some. Being in the config, it is in its digest: the
	// conversations of the agent are decided under the trust of the config
	// they record, whichever replica reads the decision.
	Trust map[string]string `json:"trust,omitempty"`
	// Roles name groups of approvers (names as in Trust or the API's
	// users) that a tool's Approvers may name.
	Roles map[string][]string `json:"roles,omitempty"`
	// Retention is how long a finished conversation of this agent is kept
	// after its last change; "0s" keeps them. Nil takes Config.Retention.
	Retention *Duration `json:"retention,omitempty"`

	// Script holds the responses of a script model, read from Model.Script.
	Script []agent.ScriptResponse `json:"-"`
	// ModelFunc makes the model Model names (set by package agentconfig,
	// which knows the providers); Config.Model, when set, is used instead.
	ModelFunc ModelFunc `json:"-"`
}

// ModelFunc makes an agent's model; lookupEnv resolves the config's
// api_key_env, logger receives the model's log.
type ModelFunc func(lookupEnv func(string) (string, bool), logger *slog.Logger) (agent.Model, error)

// ModelConfig names the model behind the agent.
type ModelConfig struct {
	Provider string `json:"provider"`
	Name     string `json:"name,omitempty"`
	BaseURL  string `json:"base_url,omitempty"`
	// APIKeyEnv names the environment variable that holds the API key. The
	// orchestrator looks it up through Config.LookupEnv.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// APIKey is set by the program (never read from a file).
	APIKey string `json:"-"`
	// Script is a JSON or YAML file with a list of responses (the conformance
	// RESPONSE shape), relative to the config file.
	Script string `json:"script,omitempty"`
	// Stream asks the provider for streamed responses where it supports them.
	Stream bool `json:"stream,omitempty"`
	// Retries is how often a request the provider answered with 408, 409,
	// 429 or 5xx (or a lost connection) is sent again; 0 sends it once.
	// Nil means the provider's default (openai: 4).
	Retries *int `json:"retries,omitempty"`
	// Backoff is the wait before the first retry, doubled at each next one
	// (see openai.Config.Backoff); a Retry-After from the provider wins.
	// Zero means the provider's default (openai: 1s).
	Backoff Duration `json:"backoff,omitempty"`
}

// ToolConfig declares one tool the model may call.
type ToolConfig struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"` // JSON Schema of the args object
	// Approval is "never" (the default), "always", or a CEL expression over
	// `args` (and `tool`) that is true when the call needs a decision.
	Approval string `json:"approval,omitempty"`
	// ApprovalMetadata goes with an approval request as its reason.
	ApprovalMetadata json.RawMessage `json:"approval_metadata,omitempty"`
	// Deadline bounds how long a deferred call of this tool may stay pending.
	// Defaults to DefaultApprovalDeadline for approvals and
	// DefaultCallDeadline for external calls.
	Deadline Duration `json:"deadline,omitempty"`
	// CallDeadline, when set, overrides Deadline for external calls.
	CallDeadline Duration `json:"call_deadline,omitempty"`
	// Executor says who runs the tool's calls: ExecutorWorker (empty: the
	// default) or ExecutorFrontend, whose calls are never published to
	// workers but answered over HTTP by the frontend driving the
	// conversation.
	Executor string `json:"executor,omitempty"`
	// Approvers, when set, says who may decide the tool's calls: approver
	// names (as in Trust or the API's users) or roles (AgentConfig.Roles),
	// or a CEL rule over the decider (Approvers.Rule). A decision by anyone
	// else is refused and audited; a grant from anyone else is ignored.
	Approvers Approvers `json:"approvers,omitzero"`
	// Approvals is how many distinct approvers must approve a call before
	// it is approved; 0 and 1 mean one. One denial denies it.
	Approvals int `json:"approvals,omitempty"`
	// SelfApproval is SelfApprovalAllow to let the run's caller approve
	// its own call; by default (empty) the approver who is the caller
	// (RunContext.Caller's id) may deny it but not approve it.
	SelfApproval string `json:"self_approval,omitempty"`
	// EscalateAfter, when set, hands an approval call still unanswered
	// this long after it was published to EscalateTo (names or roles), who
	// may then decide it too: an approval_escalated event, and the request
	// published again naming them (attempt 2). Shorter than the deadline.
	EscalateAfter Duration `json:"escalate_after,omitempty"`
	EscalateTo    []string `json:"escalate_to,omitempty"`

	// Rule is Approval compiled; nil never requires approval.
	Rule ApprovalRule `json:"-"`
	// Set for a discovered tool: its schema digest and MCP server.
	digest    string
	mcpServer string
}

// DiscoverConfig offers advertised tools whose names match Tools, with an
// approval rule and deadlines as a configured tool has them.
type DiscoverConfig struct {
	// Tools is a glob over tool names (path.Match: *, ?, [a-z]).
	Tools            string          `json:"tools"`
	Approval         string          `json:"approval,omitempty"`
	ApprovalMetadata json.RawMessage `json:"approval_metadata,omitempty"`
	Deadline         Duration        `json:"deadline,omitempty"`
	CallDeadline     Duration        `json:"call_deadline,omitempty"`

	// Rule is Approval compiled; nil never requires approval.
	Rule ApprovalRule `json:"-"`
}

// ApprovalRule decides whether a call of a tool needs a decision first.
// An error means approval is required, and says why. A rule that also
// implements ContextRule is asked with the run's context instead.
type ApprovalRule interface {
	Required(tool string, args json.RawMessage) (bool, error)
}

// ContextRule is an ApprovalRule that decides from the run's context too
// (docs/rules.md): who asks, what the conversation did so far.
type ContextRule interface {
	RequiredIn(tool string, args json.RawMessage, rc RuleContext) (bool, error)
}

// deadline returns how long a call of this kind may stay pending; a nil
// tool (one the config does not know) gets the defaults.
func (t *ToolConfig) deadline(approval bool) time.Duration {
	if t == nil {
		if approval {
			return DefaultApprovalDeadline
		}
		return DefaultCallDeadline
	}
	if !approval && t.CallDeadline > 0 {
		return t.CallDeadline.D()
	}
	if t.Deadline > 0 {
		return t.Deadline.D()
	}
	if approval {
		return DefaultApprovalDeadline
	}
	return DefaultCallDeadline
}

// tool returns the tool named name, or nil.
func (c *AgentConfig) tool(name string) *ToolConfig {
	for i := range c.Tools {
		if c.Tools[i].Name == name {
			return &c.Tools[i]
		}
	}
	return nil
}

// Duration is a time.Duration written as a Go duration string ("90s", "10m")
// or as a number of seconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid duration %q", s)
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("invalid duration %s: want a string like \"90s\" or a number of seconds", b)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// Executors of a configured tool (ToolConfig.Executor).
const (
	// ExecutorWorker: a tool-worker runs the call (the default).
	ExecutorWorker = "worker"
	// ExecutorFrontend: the frontend that drives the conversation answers
	// the call over HTTP (Orchestrator.Answer); it is never published to
	// workers.
	ExecutorFrontend = "frontend"
)

var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidToolName reports whether a model can call a tool of this name
// (letters, digits, _ and -, at most 64).
func ValidToolName(name string) bool { return toolNameRE.MatchString(name) }

var agentNameRE = toolNameRE

// ValidAgentName reports whether name can name an agent (as a tool name).
func ValidAgentName(name string) bool { return agentNameRE.MatchString(name) }

// DefaultAgentName names an agent whose config gives no name and that was
// not loaded from a file (an embedding program's Config.Agent).
const DefaultAgentName = "default"

// validateAgents checks that there is an agent and that names are valid
// subject tokens and unique.
func validateAgents(list []*AgentConfig) error {
	if len(list) == 0 {
		return errors.New("agent config is nil")
	}
	seen := map[string]bool{}
	for i, a := range list {
		if a == nil {
			return fmt.Errorf("agents[%d]: nil", i)
		}
		name := agentName(a)
		if _, err := wire.NudgeSubject(name); err != nil || !agentNameRE.MatchString(name) {
			return fmt.Errorf("agents[%d]: name %q: letters, digits, _ and -, at most 64", i, name)
		}
		if seen[name] {
			return fmt.Errorf("agents[%d]: two agents are named %q", i, name)
		}
		seen[name] = true
	}
	return nil
}

// agentName is a config's name, DefaultAgentName when it has none.
func agentName(c *AgentConfig) string {
	if c.Name != "" {
		return c.Name
	}
	return DefaultAgentName
}
