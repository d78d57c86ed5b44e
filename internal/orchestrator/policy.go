package orchestrator

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/wire"
)

// SelfApprovalAllow, as ToolConfig.SelfApproval, lets a run's caller
// approve its own calls.
const SelfApprovalAllow = "allow"

// Who may decide which call, and how long a finished conversation is kept,
// belong to the deployment, not to the replica that happens to read a
// decision or sweep: they are in the agent config, whose digest each
// conversation records. A replica's own defaults (Config.TrustedApprovers,
// Config.Retention) are folded into its configs before their digests are
// taken, so that two replicas whose configs have one digest enforce one
// policy, and a replica without the conversation's digest applies none of
// its decisions (it hands them over) and deletes none of its conversations.

// agentPolicy is an agent config's Trust, Roles and Retention, compiled.
type agentPolicy struct {
	keys  map[string]ed25519.PublicKey
	roles map[string][]string
	// retention is 0 when finished conversations are kept.
	retention time.Duration
}

// withDefaults is a copy of c given the replica's trusted keys and
// retention where c sets none.
func withDefaults(c *AgentConfig, trusted map[string]ed25519.PublicKey, retention time.Duration) *AgentConfig {
	cp := *c
	if cp.Trust == nil && len(trusted) > 0 {
		cp.Trust = make(map[string]string, len(trusted))
		for name, k := range trusted {
			cp.Trust[name] = base64.StdEncoding.EncodeToString(k)
		}
	}
	if cp.Retention == nil && retention > 0 {
		r := Duration(retention)
		cp.Retention = &r
	}
	return &cp
}

// compilePolicy reads c's policy; an error names the key that is not one.
func compilePolicy(c *AgentConfig) (agentPolicy, error) {
	p := agentPolicy{roles: c.Roles}
	if c.Retention != nil {
		p.retention = c.Retention.D()
	}
	for name, s := range c.Trust {
		k, err := ParsePublicKey(s)
		if err != nil {
			return agentPolicy{}, fmt.Errorf("trust %s: %w", name, err)
		}
		if p.keys == nil {
			p.keys = map[string]ed25519.PublicKey{}
		}
		p.keys[name] = k
	}
	return p, nil
}

// ParsePublicKey reads a base64 (standard, padded or not) ed25519 public
// key.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(s); err != nil {
			return nil, errors.New("key is not base64")
		}
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("key is %d bytes, want %d", len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// signed reports whether the policy takes only signed decisions (from
// NATS) and decisions of named users (over HTTP).
func (p *agentPolicy) signed() bool { return len(p.keys) > 0 }

// check says why decision in, for call pc of conversation c (nil when
// the call is not in c's batch) of tool tc (nil when the config names
// none), may not count: its signer is not trusted, its approver is not
// among the tool's, or it approves a call its own approver requested.
func (p *agentPolicy) check(c *conversation.State, pc *conversation.PendingCall, tc *ToolConfig, in incoming) error {
	d := in.decision
	if p.signed() {
		if in.http {
			if !in.identified {
				return errors.New("approver keys are trusted: a decision over HTTP needs a caller named by the API's users")
			}
		} else if err := p.verify("decision", d.ApproverID, d.Signature, d.Verify); err != nil {
			return err
		}
	}
	return p.admit(c, pc, tc, d.ApproverID, d.Approved)
}

// admit says why approver id may not decide call pc of c (nil when the
// call is not in c's batch) of tool tc (nil when the config names none)
// as approved says: it is not among the tool's approvers (nor, once pc is
// escalated, its escalation group), or it would approve a call it
// requested itself. Decisions and grants are admitted alike.
func (p *agentPolicy) admit(c *conversation.State, pc *conversation.PendingCall, tc *ToolConfig, id string, approved bool) error {
	if tc == nil {
		return nil
	}
	escalated := pc != nil && pc.Escalated() && p.mayDecide(tc.EscalateTo, id)
	switch {
	case escalated:
	case tc.Approvers.Rule != "":
		if err := p.ruleAdmits(c, pc, tc, id); err != nil {
			return err
		}
	case len(tc.Approvers.Names) > 0 && !p.mayDecide(tc.Approvers.Names, id):
		return fmt.Errorf("approver %q may not decide tool %s (approvers: %s)", id, tc.Name, strings.Join(tc.Approvers.Names, ", "))
	}
	if approved && tc.SelfApproval != SelfApprovalAllow {
		if who := CallerID(c.Caller); who != "" && who == id {
			return fmt.Errorf("approver %q is the run's caller: it may not approve its own call", id)
		}
	}
	return nil
}

// verify checks the signature sig of a decision or a grant (what) from
// approver id against id's key (D36); check is its Verify.
func (p *agentPolicy) verify(what, id string, sig []byte, check func(ed25519.PublicKey) error) error {
	key, ok := p.keys[id]
	if !ok {
		return fmt.Errorf("approver %q is not trusted", id)
	}
	if len(sig) == 0 {
		return fmt.Errorf("%s from %s is not signed", what, id)
	}
	if err := check(key); err != nil {
		return fmt.Errorf("%s from %s: %w", what, id, err)
	}
	return nil
}

// mayDecide reports whether approver id is named by approvers, itself or
// by a role that lists it.
func (p *agentPolicy) mayDecide(approvers []string, id string) bool {
	for _, a := range approvers {
		if a == id || slices.Contains(p.roles[a], id) {
			return true
		}
	}
	return false
}

// approversOf lists the names that may decide call pc of tool tc (its
// approvers and, once pc is escalated, its escalation group, roles
// expanded), sorted; nil when anyone trusted may.
func (p *agentPolicy) approversOf(tc *ToolConfig, pc *conversation.PendingCall) []string {
	if tc == nil || len(tc.Approvers.Names) == 0 {
		// None named, or a rule (ruleAdmits) that the approver side does
		// not evaluate: every approver is shown the call.
		return nil
	}
	names := slices.Clone(tc.Approvers.Names)
	if pc != nil && pc.Escalated() {
		names = append(names, tc.EscalateTo...)
	}
	var out []string
	for _, n := range names {
		if members, ok := p.roles[n]; ok {
			out = append(out, members...)
		} else {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// decider is approver id as p knows it.
func (p *agentPolicy) decider(id string) Decider {
	d := Decider{ID: id}
	for role, members := range p.roles {
		if slices.Contains(members, id) {
			d.Roles = append(d.Roles, role)
		}
	}
	slices.Sort(d.Roles)
	if k, ok := p.keys[id]; ok {
		d.Key = base64.StdEncoding.EncodeToString(k)
	}
	return d
}

// ruleAdmits says why tc's approvers rule does not admit approver id to
// decide call pc (nil when not in c's batch) of c.
func (p *agentPolicy) ruleAdmits(c *conversation.State, pc *conversation.PendingCall, tc *ToolConfig, id string) error {
	r := tc.Approvers.Compiled
	if r == nil {
		return fmt.Errorf("approver %q may not decide tool %s: its approvers rule is not compiled", id, tc.Name)
	}
	rc := &agent.RunContext{Caller: c.Caller, ConversationID: c.ID, Messages: c.History}
	var args json.RawMessage
	if c.Batch != nil {
		rc.RunID = c.Batch.RunID
	}
	if pc != nil {
		args = pc.Args
	}
	ok, err := r.Admits(p.decider(id), tc.Name, args, ruleContext(rc, c.Agent, tc))
	if err != nil {
		return fmt.Errorf("approver %q may not decide tool %s: %w", id, tc.Name, err)
	}
	if !ok {
		return fmt.Errorf("approver %q may not decide tool %s (approvers rule: %s)", id, tc.Name, tc.Approvers.Rule)
	}
	return nil
}

// quorumOf is how many distinct approvers a call of tc needs.
func quorumOf(tc *ToolConfig) int {
	if tc == nil || tc.Approvals < 1 {
		return 1
	}
	return tc.Approvals
}

// CallerID is the identity of a run's caller (StartRequest.Caller) that
// separation of duties compares approvers with: the caller itself when it
// is a string, else its "id", else its "name"; "" when it has none.
func CallerID(caller json.RawMessage) string {
	if len(caller) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(caller, &s) == nil {
		return s
	}
	var o struct {
		ID   any `json:"id"`
		Name any `json:"name"`
	}
	if json.Unmarshal(caller, &o) != nil {
		return ""
	}
	for _, v := range []any{o.ID, o.Name} {
		if s, ok := v.(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// grantRefusal says why grant sg may not decide call pc (nil: none in
// particular) of c, of tool tc, under p: a grant on the bus must be signed
// by a key p trusts, as a decision from NATS (one given over the HTTP API
// was refused there unless its giver is a user the API names), and its
// giver must be one who may decide the call (admit), as a decision's.
func (p *agentPolicy) grantRefusal(c *conversation.State, pc *conversation.PendingCall, tc *ToolConfig, sg StoredGrant) error {
	g := sg.Grant
	if sg.Source == wire.GrantKeyBus && p.signed() {
		if err := p.verify("grant", g.GrantedBy, g.Signature, g.Verify); err != nil {
			return err
		}
	}
	return p.admit(c, pc, tc, g.GrantedBy, g.Approved)
}
