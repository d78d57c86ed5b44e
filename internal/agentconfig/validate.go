package agentconfig

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"

	"github.com/toolgate/toolgate/internal/orchestrator"
)

// validate checks the config, fills in defaults and compiles the approval
// rules; every error names the field (a *fieldError, so that Parse adds its
// line).
func validate(c *orchestrator.AgentConfig, needTools bool) error {
	if err := validateModel(c); err != nil {
		return err
	}
	if c.InlineWait < 0 {
		return fieldErrorf("inline_wait", "inline_wait: must not be negative")
	}
	if c.MaxModelRequests < 0 {
		return fieldErrorf("max_model_requests", "max_model_requests: must not be negative")
	}
	if needTools && len(c.Tools) == 0 && len(c.Discover) == 0 {
		return fieldErrorf("tools", "tools: at least one tool (or a discover: entry) is required")
	}
	for i := range c.Discover {
		if err := validateDiscover(&c.Discover[i], fmt.Sprintf("discover[%d]", i)); err != nil {
			return err
		}
	}
	if err := validatePolicy(c); err != nil {
		return err
	}
	seen := make(map[string]bool, len(c.Tools))
	for i := range c.Tools {
		t := &c.Tools[i]
		if err := validateTool(t, fmt.Sprintf("tools[%d]", i), seen); err != nil {
			return err
		}
		if err := validateApprovers(c, t, fmt.Sprintf("tools[%d]", i)); err != nil {
			return err
		}
		seen[t.Name] = true
	}
	return nil
}

// validatePolicy checks who may decide (trust:, roles:) and retention:.
func validatePolicy(c *orchestrator.AgentConfig) error {
	for _, name := range slices.Sorted(maps.Keys(c.Trust)) {
		if _, err := orchestrator.ParsePublicKey(c.Trust[name]); err != nil {
			return fieldErrorf("trust."+name, "trust.%s: %w (want a base64 ed25519 public key)", name, err)
		}
	}
	for _, role := range slices.Sorted(maps.Keys(c.Roles)) {
		if len(c.Roles[role]) == 0 {
			return fieldErrorf("roles."+role, "roles.%s: lists no approver", role)
		}
	}
	if c.Retention != nil && *c.Retention < 0 {
		return fieldErrorf("retention", "retention: must not be negative (0s keeps finished conversations)")
	}
	return nil
}

// validateApprovers checks a tool's approvers:, approvals: and
// self_approval:.
func validateApprovers(c *orchestrator.AgentConfig, t *orchestrator.ToolConfig, at string) error {
	label := fmt.Sprintf("%s (%s)", at, t.Name)
	for i, a := range t.Approvers.Names {
		if a == "" {
			return fieldErrorf(fmt.Sprintf("%s.approvers[%d]", at, i), "%s.approvers[%d]: empty name", label, i)
		}
	}
	if t.Approvers.Rule != "" {
		r, err := compileApprovers(t.Approvers.Rule)
		if err != nil {
			return fieldErrorf(at+".approvers.rule", "%s.approvers.rule: %w", label, err)
		}
		t.Approvers.Compiled = r
	}
	if t.Approvals < 0 {
		return fieldErrorf(at+".approvals", "%s.approvals: must not be negative", label)
	}
	if n := distinctApprovers(c, t); t.Approvals > 1 && n > 0 && n < t.Approvals {
		return fieldErrorf(at+".approvals", "%s.approvals: %d, but its approvers name %d people", label, t.Approvals, n)
	}
	switch {
	case t.EscalateAfter < 0:
		return fieldErrorf(at+".escalate_after", "%s.escalate_after: must not be negative", label)
	case t.EscalateAfter > 0 && len(t.EscalateTo) == 0:
		return fieldErrorf(at+".escalate_to", "%s.escalate_to: required with escalate_after (the approvers or roles to hand the call to)", label)
	case t.EscalateAfter == 0 && len(t.EscalateTo) > 0:
		return fieldErrorf(at+".escalate_after", "%s.escalate_after: required with escalate_to", label)
	case t.EscalateAfter > 0 && t.Deadline > 0 && t.EscalateAfter >= t.Deadline:
		return fieldErrorf(at+".escalate_after", "%s.escalate_after: %s is not before the deadline %s", label, t.EscalateAfter.D(), t.Deadline.D())
	}
	switch t.SelfApproval {
	case "", orchestrator.SelfApprovalAllow, "deny":
	default:
		return fieldErrorf(at+".self_approval", "%s.self_approval: %q (want allow or deny)", label, t.SelfApproval)
	}
	return nil
}

// distinctApprovers counts the people a tool's approvers name (roles
// expanded); 0 when it names none (anyone trusted may decide).
func distinctApprovers(c *orchestrator.AgentConfig, t *orchestrator.ToolConfig) int {
	people := map[string]bool{}
	for _, a := range t.Approvers.Names {
		if members, ok := c.Roles[a]; ok {
			for _, m := range members {
				people[m] = true
			}
			continue
		}
		people[a] = true
	}
	return len(people)
}

func validateModel(c *orchestrator.AgentConfig) error {
	switch c.Model.Provider {
	case ProviderOpenAI:
		if c.Model.Name == "" {
			return fieldErrorf("model.name", "model.name: required for the openai provider")
		}
	case ProviderScript:
		if c.Model.Script == "" && len(c.Script) == 0 {
			return fieldErrorf("model.script", "model.script: required for the script provider")
		}
	case ProviderTest:
	case "":
		return fieldErrorf("model.provider", "model.provider: required (openai, script or test)")
	default:
		return fieldErrorf("model.provider", "model.provider: unknown provider %q (want openai, script or test)", c.Model.Provider)
	}
	if r := c.Model.Retries; r != nil && (*r < 0 || *r > maxModelRetries) {
		return fieldErrorf("model.retries", "model.retries: %d is outside [0, %d]", *r, maxModelRetries)
	}
	if c.Model.Backoff < 0 {
		return fieldErrorf("model.backoff", "model.backoff: %s is negative", c.Model.Backoff.D())
	}
	return nil
}

// maxModelRetries bounds model.retries: with the backoff's cap of 30s, more
// would hold a run for many minutes on a provider that is down.
const maxModelRetries = 20

func validateDiscover(d *orchestrator.DiscoverConfig, at string) error {
	if d.Tools == "" {
		return fieldErrorf(at+".tools", "%s.tools: required (a glob over tool names, such as \"get-*\" or \"*\")", at)
	}
	if _, err := path.Match(d.Tools, ""); err != nil {
		return fieldErrorf(at+".tools", "%s.tools: %q is not a glob: %w", at, d.Tools, err)
	}
	var err error
	d.Rule, err = checkGate(at, at, d.Approval, &d.ApprovalMetadata, d.Deadline, d.CallDeadline)
	return err
}

// validateTool checks tools[i] (at); seen holds the names of the tools
// before it.
func validateTool(t *orchestrator.ToolConfig, at string, seen map[string]bool) error {
	if !orchestrator.ValidToolName(t.Name) {
		return fieldErrorf(at+".name", "%s.name: %q is not a tool name (letters, digits, _ and -, at most 64)", at, t.Name)
	}
	label := fmt.Sprintf("%s (%s)", at, t.Name)
	if seen[t.Name] {
		return fieldErrorf(at+".name", "%s.name: duplicate tool name", label)
	}
	if len(t.Parameters) == 0 || string(t.Parameters) == "null" {
		t.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	t.Parameters = compactJSON(t.Parameters)
	var schema map[string]any
	if err := json.Unmarshal(t.Parameters, &schema); err != nil {
		return fieldErrorf(at+".parameters", "%s.parameters: want a JSON Schema object: %w", label, err)
	}
	if typ, ok := schema["type"]; ok && typ != "object" {
		return fieldErrorf(at+".parameters", "%s.parameters: the args schema must have type \"object\", not %v", label, typ)
	}
	switch t.Executor {
	case "", orchestrator.ExecutorWorker, orchestrator.ExecutorFrontend:
	default:
		return fieldErrorf(at+".executor", "%s.executor: %q is not an executor (want worker or frontend)", label, t.Executor)
	}
	var err error
	t.Rule, err = checkGate(at, label, t.Approval, &t.ApprovalMetadata, t.Deadline, t.CallDeadline)
	return err
}

// checkGate checks what a tool and a discover: entry both have (the
// approval rule, its metadata, the deadlines) and compiles the rule; at is
// the field's path, label how errors name it.
func checkGate(at, label, approval string, meta *json.RawMessage, deadline, callDeadline orchestrator.Duration) (orchestrator.ApprovalRule, error) {
	m, err := objectOrNil(*meta)
	if err != nil {
		return nil, fieldErrorf(at+".approval_metadata", "%s.approval_metadata: want an object: %w", label, err)
	}
	*meta = m
	if deadline < 0 || callDeadline < 0 {
		return nil, fieldErrorf(at+".deadline", "%s.deadline: must not be negative", label)
	}
	rule, err := compileApproval(approval)
	if err != nil {
		return nil, fieldErrorf(at+".approval", "%s.approval: %w", label, err)
	}
	return rule, nil
}

// fieldError is a config error about the field at Path ("tools[0].name").
type fieldError struct {
	Path string
	Err  error
}

func (e *fieldError) Error() string { return e.Err.Error() }
func (e *fieldError) Unwrap() error { return e.Err }

func fieldErrorf(at, format string, args ...any) error {
	return &fieldError{Path: at, Err: fmt.Errorf(format, args...)}
}
