package agentconfig

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/wire"
)

// The orchestrator's `approval:` and an approver policy's `when:` are one
// dialect (package rule): the same expression over the same model-made args
// decides the same at both gates, or fails at both (the orchestrator then
// requires approval, the policy skips the rule). The cases marked "before"
// were decided differently by the orchestrator's former engine, which had
// no cross-type numeric comparison, no number normalisation and no cost
// limit.
func TestApprovalAndPolicyDecideAlike(t *testing.T) {
	many := make([]string, 120)
	for i := range many {
		many[i] = "x"
	}
	manyJSON, _ := json.Marshal(map[string]any{"items": many})
	for _, tc := range []struct {
		expr, args string
		want       bool // at both gates, when neither fails
		fails      bool
	}{
		{`args.path == ".env"`, `{"path":".env"}`, true, false},
		{`args.path == ".env"`, `{"path":"a.txt"}`, false, false},
		// before: 1.0 > 2 had no overload, so approval was required.
		{`args.count > 2`, `{"count":1}`, false, false},
		// before: a JSON integer was a double, and double + int failed.
		{`args.count + 1 == 4`, `{"count":3}`, true, false},
		{`args.size > 1.5`, `{"size":2}`, true, false},
		{`args.path.lowerAscii().endsWith(".env")`, `{"path":"A.ENV"}`, true, false},
		{`tool == "update_file" && has(args.path)`, `{"path":"p"}`, true, false},
		{`args.missing == 1`, `{}`, false, true},
		// before: no cost limit, so model-made args could make the
		// orchestrator spin (here 1.7 million steps) before any approver saw
		// the call.
		{`args.items.all(x, args.items.all(y, args.items.all(z, z == "x")))`, string(manyJSON), true, true},
	} {
		r, err := compileApproval(tc.expr)
		if err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
		required, rerr := r.Required("update_file", json.RawMessage(tc.args))

		p, err := approver.ParsePolicy([]byte("rules:\n  - when: '" + strings.ReplaceAll(tc.expr, "'", "''") + "'\n    action: approve\n"))
		if err != nil {
			t.Fatalf("%s: policy: %v", tc.expr, err)
		}
		v, err := p.Evaluate(wire.ApprovalRequest{ToolName: "update_file", ToolCallID: "c", Args: json.RawMessage(tc.args)})
		if err != nil {
			t.Fatalf("%s: evaluate: %v", tc.expr, err)
		}
		matched, skipped := v.Rule == 0, len(v.Skipped) > 0

		if tc.fails {
			if rerr == nil || !required || !skipped {
				t.Errorf("%s on %.60s: orchestrator (%v, %v), policy skipped %v; want a failure at both (approval required, rule skipped)", tc.expr, tc.args, required, rerr, skipped)
			}
			continue
		}
		if rerr != nil || skipped || required != tc.want || matched != tc.want {
			t.Errorf("%s on %s: orchestrator %v (%v), policy %v (skipped %v); want %v at both", tc.expr, tc.args, required, rerr, matched, v.Skipped, tc.want)
		}
	}
}
