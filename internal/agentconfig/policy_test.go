package agentconfig_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

const key = "11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="

// Who may decide, and retention, are read from the agent file.
func TestParsePolicy(t *testing.T) {
	t.Parallel()
	cfg, err := agentconfig.Parse([]byte(`
model: {provider: test}
trust: {ann: "`+key+`", bob: "`+key+`"}
roles: {ops: [ann, bob]}
retention: 720h
tools:
  - name: deploy
    approval: always
    approvers: [ops, carol]
    approvals: 2
    self_approval: allow
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	tc := cfg.Tools[0]
	if len(cfg.Trust) != 2 || len(cfg.Roles["ops"]) != 2 || cfg.Retention == nil || cfg.Retention.D() != 720*time.Hour ||
		len(tc.Approvers.Names) != 2 || tc.Approvals != 2 || tc.SelfApproval != "allow" {
		t.Errorf("parsed %+v, tool %+v", cfg, tc)
	}
}

func TestParsePolicyErrors(t *testing.T) {
	t.Parallel()
	head := "model: {provider: test}\n"
	tool := "tools:\n  - name: t\n"
	cases := []struct{ name, yaml, want string }{
		{"bad key", head + "trust: {ann: 'no pe!'}\n" + tool, "trust.ann: key is not base64"},
		{"short key", head + "trust: {ann: AAAA}\n" + tool, "trust.ann: key is 3 bytes"},
		{"empty role", head + "roles: {ops: []}\n" + tool, "roles.ops: lists no approver"},
		{"negative retention", head + "retention: -1h\n" + tool, "retention: must not be negative"},
		{"negative approvals", head + tool + "    approvals: -1\n", "tools[0] (t).approvals: must not be negative"},
		{"quorum above approvers", head + tool + "    approvers: [ann]\n    approvals: 2\n", "tools[0] (t).approvals: 2, but its approvers name 1"},
		{"escalation without a group", head + tool + "    escalate_after: 5m\n", "tools[0] (t).escalate_to: required with escalate_after"},
		{"group without escalation", head + tool + "    escalate_to: [ops]\n", "tools[0] (t).escalate_after: required with escalate_to"},
		{"escalation after the deadline", head + tool + "    deadline: 5m\n    escalate_after: 10m\n    escalate_to: [ops]\n", "escalate_after: 10m0s is not before the deadline 5m0s"},
		{"bad self approval", head + tool + "    self_approval: maybe\n", `tools[0] (t).self_approval: "maybe"`},
		{"approvers rule that does not compile", head + tool + "    approvers: {rule: 'decider.idd =='}\n", "tools[0] (t).approvers.rule: CEL"},
		{"approvers rule not a bool", head + tool + "    approvers: {rule: 'decider.id'}\n", "tools[0] (t).approvers.rule: CEL"},
		{"approvers rule empty", head + tool + "    approvers: {rule: ''}\n", "empty rule"},
		{"approvers object without a rule", head + tool + "    approvers: {names: [ann]}\n", "want a list of names or {rule: EXPR}"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := agentconfig.Parse([]byte(tc.yaml), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// approvers: {rule: EXPR} is compiled at load and evaluated over the
// decider (id, roles, key) and the caller; the list form keeps the digest
// it had before the rule form existed.
func TestParseApproversRule(t *testing.T) {
	t.Parallel()
	cfg, err := agentconfig.Parse([]byte(`
model: {provider: test}
trust: {ann: "`+key+`"}
roles: {sre: [ann, bob]}
tools:
  - name: deploy
    approval: always
    approvers: {rule: 'decider.roles.exists(r, r == "sre") && decider.id != caller.id && decider.key != ""'}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	a := cfg.Tools[0].Approvers
	if a.Compiled == nil || len(a.Names) != 0 || !strings.HasPrefix(a.Rule, "decider.roles") {
		t.Fatalf("approvers %+v, want the rule compiled", a)
	}
	rc := orchestrator.RuleContext{Caller: json.RawMessage(`{"id":"carol"}`)}
	for _, tc := range []struct {
		d    orchestrator.Decider
		want bool
	}{
		{orchestrator.Decider{ID: "ann", Roles: []string{"sre"}, Key: key}, true},
		{orchestrator.Decider{ID: "bob", Roles: []string{"sre"}}, false},             // no key
		{orchestrator.Decider{ID: "mallory", Key: key}, false},                       // no role
		{orchestrator.Decider{ID: "carol", Roles: []string{"sre"}, Key: key}, false}, // the caller
	} {
		if ok, err := a.Compiled.Admits(tc.d, "deploy", nil, rc); err != nil || ok != tc.want {
			t.Errorf("Admits(%+v) = %v, %v; want %v", tc.d, ok, err, tc.want)
		}
	}
	list, err := agentconfig.Parse([]byte("model: {provider: test}\ntools:\n  - name: deploy\n    approval: always\n    approvers: [ann, ops]\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(list.Tools[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"approvers":["ann","ops"]`) {
		t.Errorf("list form marshals as %s", raw)
	}
	none, _ := json.Marshal(orchestrator.ToolConfig{Name: "x"})
	if strings.Contains(string(none), "approvers") {
		t.Errorf("a tool without approvers marshals as %s", none)
	}
}
