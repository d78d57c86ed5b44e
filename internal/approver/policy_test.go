package approver_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/wire"
)

func request(tool, args, meta string) wire.ApprovalRequest {
	r := wire.ApprovalRequest{ToolCallID: "call-1", RunID: "run-1", ToolName: tool, Args: json.RawMessage(args)}
	if meta != "" {
		r.Metadata = json.RawMessage(meta)
	}
	return r
}

const testPolicy = `
rules:
  - tool: delete_file
    action: deny
    message: Deleting files is not allowed
  - tool: "read_*"
    when: args.path.startsWith("/etc/")
    action: deny
  - tool: "read_*"
    action: approve
  - tool: send_email
    when: args.to.endsWith("@example.com") && size(args.body) < 100
    action: approve
  - tool: transfer
    when: args.amount <= 100
    action: approve
    override_args:
      amount: 100
      memo: capped
      tags: [auto, small]
  - tool: transfer
    when: args.amount > 100.5
    action: escalate
  - when: has(metadata.reason) && metadata.reason == "trusted"
    action: approve
  - when: tool == "shell" && args.cmd in ["ls", "pwd"]
    action: approve
  - tool: "[xy]ray"
    action: deny
    message: no rays
`

func TestPolicyEvaluate(t *testing.T) {
	t.Parallel()
	p, err := approver.ParsePolicy([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		req         wire.ApprovalRequest
		want        approver.Verdict
		wantSkipped []int
	}{
		{
			name: "exact tool deny with message",
			req:  request("delete_file", `{"path":"/tmp/x"}`, ""),
			want: approver.Verdict{Action: approver.ActionDeny, Message: "Deleting files is not allowed", Rule: 0},
		},
		{
			name: "glob and CEL over args deny with default message",
			req:  request("read_file", `{"path":"/etc/passwd"}`, ""),
			want: approver.Verdict{Action: approver.ActionDeny, Message: approver.PolicyDenyMessage, Rule: 1},
		},
		{
			name: "first match wins: glob without when approves",
			req:  request("read_dir", `{"path":"/home"}`, ""),
			want: approver.Verdict{Action: approver.ActionApprove, Rule: 2},
		},
		{
			name:        "evaluation error does not match (missing key) and is reported",
			req:         request("read_file", `{"file":"/etc/passwd"}`, ""),
			want:        approver.Verdict{Action: approver.ActionApprove, Rule: 2},
			wantSkipped: []int{1},
		},
		{
			name: "two conditions over args",
			req:  request("send_email", `{"to":"bob@example.com","body":"hi"}`, ""),
			want: approver.Verdict{Action: approver.ActionApprove, Rule: 3},
		},
		{
			name: "condition false falls through to escalate",
			req:  request("send_email", `{"to":"bob@evil.test","body":"hi"}`, ""),
			want: approver.Verdict{Action: approver.ActionEscalate, Rule: -1},
		},
		{
			name: "integral JSON number compares with int literal; override args",
			req:  request("transfer", `{"amount":50}`, ""),
			want: approver.Verdict{Action: approver.ActionApprove, Rule: 4,
				OverrideArgs: json.RawMessage(`{"amount":100,"memo":"capped","tags":["auto","small"]}`)},
		},
		{
			name: "fractional number compares across types",
			req:  request("transfer", `{"amount":100.75}`, ""),
			want: approver.Verdict{Action: approver.ActionEscalate, Rule: 5},
		},
		{
			name: "no tool glob: CEL over metadata",
			req:  request("anything", `{}`, `{"reason":"trusted"}`),
			want: approver.Verdict{Action: approver.ActionApprove, Rule: 6},
		},
		{
			name: "absent metadata is an empty map",
			req:  request("anything", `{}`, ""),
			want: approver.Verdict{Action: approver.ActionEscalate, Rule: -1},
		},
		{
			name: "tool variable and list membership",
			req:  request("shell", `{"cmd":"ls"}`, ""),
			want: approver.Verdict{Action: approver.ActionApprove, Rule: 7},
		},
		{
			name: "missing key in a rule without tool glob",
			req:  request("shell", `{"command":"rm"}`, ""),
			want: approver.Verdict{Action: approver.ActionEscalate, Rule: -1}, wantSkipped: []int{7},
		},
		{
			name: "character class glob",
			req:  request("xray", `{}`, ""),
			want: approver.Verdict{Action: approver.ActionDeny, Message: "no rays", Rule: 8},
		},
		{
			name: "glob does not match a longer name",
			req:  request("xray2", `{}`, ""),
			want: approver.Verdict{Action: approver.ActionEscalate, Rule: -1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := p.Evaluate(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			var skipped []int
			for _, s := range got.Skipped {
				skipped = append(skipped, s.Index)
			}
			got.Skipped = nil
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantSkipped, skipped); diff != "" {
				t.Errorf("skipped rules (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPolicyEvaluateBadRequest(t *testing.T) {
	t.Parallel()
	p, err := approver.ParsePolicy([]byte("rules:\n  - action: approve\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, args, meta string }{
		{"args array", `[1]`, ""},
		{"args invalid", `{`, ""},
		{"metadata string", `{}`, `"x"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := p.Evaluate(request("t", tt.args, tt.meta))
			if err == nil {
				t.Fatalf("Evaluate = %+v, want an error", v)
			}
		})
	}
}

func TestParsePolicyRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		yaml     string
		wantRule int // -1: not a rule error
		wantText string
	}{
		{"syntax error", "rules:\n  - action: approve\n  - when: 'args.x =='\n    action: deny\n", 1, "when"},
		{"not bool", "rules:\n  - when: args.x\n    action: approve\n", 0, "want bool"},
		{"int result", "rules:\n  - when: '1 + 2'\n    action: approve\n", 0, "want bool"},
		{"unknown variable", "rules:\n  - when: request.x == 1\n    action: approve\n", 0, "undeclared reference"},
		{"unknown function", "rules:\n  - when: nope(args)\n    action: approve\n", 0, "nope"},
		{"missing action", "rules:\n  - tool: x\n", 0, "action is required"},
		{"unknown action", "rules:\n  - action: allow\n", 0, "unknown action"},
		{"bad glob", "rules:\n  - tool: '[x'\n    action: approve\n", 0, "syntax error in pattern"},
		{"override with deny", "rules:\n  - action: deny\n    override_args: {a: 1}\n", 0, "override_args"},
		{"message with approve", "rules:\n  - action: approve\n    message: hi\n", 0, "message"},
		{"escalate with message", "rules:\n  - action: escalate\n    message: hi\n", 0, "not allowed"},
		{"misspelt key", "rules:\n  - action: approve\n    wehn: 'false'\n", -1, "wehn"},
		{"not yaml", "rules: [", -1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := approver.ParsePolicy([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("ParsePolicy = %d rules, want an error", p.Len())
			}
			var re *approver.RuleError
			switch {
			case tt.wantRule >= 0 && !errors.As(err, &re):
				t.Fatalf("error %q is not a *RuleError", err)
			case tt.wantRule >= 0 && re.Index != tt.wantRule:
				t.Errorf("rule index = %d, want %d", re.Index, tt.wantRule)
			case tt.wantRule < 0 && errors.As(err, &re):
				t.Errorf("error %q is a rule error, want a file error", err)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %q does not mention %q", err, tt.wantText)
			}
			if tt.wantRule >= 0 && !strings.Contains(err.Error(), "rule "+string(rune('0'+tt.wantRule))) {
				t.Errorf("error %q does not name the rule", err)
			}
		})
	}
}

func TestLoadPolicyExamples(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("../../examples/policy*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d example policies, want at least 2", len(files))
	}
	for _, f := range files {
		if _, err := approver.LoadPolicy(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestDemoPolicy(t *testing.T) {
	t.Parallel()
	p, err := approver.LoadPolicy("../../examples/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	v, err := p.Evaluate(request("delete_file", `{"path":"a"}`, ""))
	if err != nil {
		t.Fatal(err)
	}
	if v.Action != approver.ActionDeny || v.Message != "Deleting files is not allowed" {
		t.Errorf("delete_file: %+v", v)
	}
	v, err = p.Evaluate(request("write_file", `{"path":"a"}`, ""))
	if err != nil {
		t.Fatal(err)
	}
	if v.Action != approver.ActionApprove || v.OverrideArgs != nil {
		t.Errorf("write_file: %+v", v)
	}
}

func TestLoadPolicyMissingFile(t *testing.T) {
	t.Parallel()
	_, err := approver.LoadPolicy(filepath.Join(t.TempDir(), "none.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("err = %v, want not exist", err)
	}
}

func TestAdvancedExamplePolicy(t *testing.T) {
	t.Parallel()
	p, err := approver.LoadPolicy("../../examples/policy-advanced.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		req          wire.ApprovalRequest
		want         approver.Action
		wantOverride string
	}{
		{"delete outside /tmp", request("delete_file", `{"path":"/home/a"}`, ""), approver.ActionDeny, ""},
		{"delete without path", request("delete_file", `{}`, ""), approver.ActionDeny, ""},
		{"delete in /tmp", request("delete_file", `{"path":"/tmp/a"}`, ""), approver.ActionEscalate, ""},
		{"read secret", request("read_file", `{"path":"/home/a/.ssh/id"}`, ""), approver.ActionDeny, ""},
		{"read", request("read_file", `{"path":"/home/a/x"}`, ""), approver.ActionApprove, ""},
		{"small payment", request("pay", `{"amount":5,"to":"x"}`, ""), approver.ActionApprove, `{"amount":20,"currency":"EUR","note":"auto-approved, capped at 20"}`},
		{"big payment", request("pay", `{"amount":5000}`, `{"risk":"low"}`), approver.ActionEscalate, ""},
		{"low risk", request("other", `{}`, `{"risk":"low"}`), approver.ActionApprove, ""},
		{"mail inside", request("send_email", `{"to":"a@example.com","cc":["b"]}`, ""), approver.ActionApprove, ""},
		{"mail outside", request("send_email", `{"to":"a@evil.test"}`, ""), approver.ActionEscalate, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := p.Evaluate(tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if v.Action != tt.want || string(v.OverrideArgs) != tt.wantOverride || len(v.Skipped) != 0 {
				t.Errorf("verdict = %+v, want %s with override %s", v, tt.want, tt.wantOverride)
			}
		})
	}
}

// A policy error says where in the file it is: the line and column of the
// key at fault, or of the rule; YAML errors carry theirs.
func TestPolicyErrorsCarryTheLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       string
	}{
		{"bad when", "rules:\n  - action: approve\n  - tool: x\n    when: 'args.x =='\n    action: deny\n", "line 4, column 11: rule 1: when"},
		{"unknown action", "rules:\n  - action: approve\n\n  - action: allow\n", "line 4, column 13: rule 1: unknown action"},
		{"missing action", "rules:\n  - action: approve\n  - tool: x\n", "line 3, column 5: rule 1: action is required"},
		{"misspelt key", "rules:\n  - action: approve\n    wehn: 'false'\n", "[3:5]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := approver.ParsePolicy([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// A policy's when: sees the run's caller the request carries (an object);
// a request without one, or with a caller that is not an object, has an
// empty caller, and an unguarded rule over it is skipped. Before, caller
// was always empty at the approver.
func TestPolicyEvaluatesTheCaller(t *testing.T) {
	t.Parallel()
	p, err := approver.ParsePolicy([]byte(`
rules:
  - when: has(caller.role) && caller.role == "admin"
    action: approve
  - when: caller.team == "ops"
    action: deny
    message: ops asks the on-call
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, caller string
		want         approver.Action
		skipped      int
	}{
		{"admin", `{"id":"ann","role":"admin"}`, approver.ActionApprove, 0},
		{"ops", `{"id":"bob","team":"ops"}`, approver.ActionDeny, 0},
		{"none", ``, approver.ActionEscalate, 1},
		{"a string", `"carol"`, approver.ActionEscalate, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := request("deploy", `{}`, "")
			if tc.caller != "" {
				req.Caller = json.RawMessage(tc.caller)
			}
			v, err := p.Evaluate(req)
			if err != nil {
				t.Fatal(err)
			}
			if v.Action != tc.want || len(v.Skipped) != tc.skipped {
				t.Errorf("verdict %s with %d rules skipped, want %s with %d", v.Action, len(v.Skipped), tc.want, tc.skipped)
			}
		})
	}
}
