package agentconfig_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agentconfig"
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
		len(tc.Approvers) != 2 || tc.Approvals != 2 || tc.SelfApproval != "allow" {
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
