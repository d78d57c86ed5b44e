package agentconfig_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/worker"
)

const goodConfig = `
model:
  provider: script
  script: s.yaml
instructions: be brief
inline_wait: 2s
max_model_requests: 7
tools:
  - name: update_file
    description: Update a file
    parameters:
      type: object
      properties: {path: {type: string}, content: {type: string}}
      required: [path, content]
    approval: args.path == ".env"
    approval_metadata: {reason: protected}
  - name: delete_file
    approval: always
    deadline: 90s
  - name: calculate_answer
    deadline: 30
`

func TestParseAgentConfig(t *testing.T) {
	t.Parallel()
	dir := fstest.MapFS{"s.yaml": {Data: []byte("- text: hi\n")}}
	cfg, err := agentconfig.Parse([]byte(goodConfig), dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.InlineWait.D() != 2*time.Second || cfg.MaxModelRequests != 7 || cfg.Instructions != "be brief" {
		t.Errorf("config = %+v", cfg)
	}
	if len(cfg.Script) != 1 || cfg.Script[0].Text != "hi" {
		t.Errorf("script = %+v", cfg.Script)
	}
	if got := cfg.Tools[1].Deadline.D(); got != 90*time.Second {
		t.Errorf("delete_file deadline = %s", got)
	}
	if got := cfg.Tools[2].Deadline.D(); got != 30*time.Second {
		t.Errorf("calculate_answer deadline = %s (a number is seconds)", got)
	}
	if got := string(cfg.Tools[0].ApprovalMetadata); got != `{"reason":"protected"}` {
		t.Errorf("approval metadata = %s", got)
	}
	// A tool without parameters takes an empty object.
	var schema map[string]any
	if err := json.Unmarshal(cfg.Tools[1].Parameters, &schema); err != nil || schema["type"] != "object" {
		t.Errorf("default parameters = %s", cfg.Tools[1].Parameters)
	}

	// The same config as JSON.
	j := `{"model":{"provider":"test"},"tools":[{"name":"t","approval":"args.n > 3"}]}`
	if _, err := agentconfig.Parse([]byte(j), nil); err != nil {
		t.Errorf("json config: %v", err)
	}
}

func TestParseAgentConfigErrors(t *testing.T) {
	t.Parallel()
	dir := fstest.MapFS{"s.yaml": {Data: []byte("- text: hi\n")}, "empty.yaml": {Data: []byte("[]\n")}}
	tool := "tools:\n  - name: t\n"
	cases := []struct {
		name, yaml, want string
	}{
		{"no provider", "model: {}\n" + tool, "model.provider: required"},
		{"unknown provider", "model: {provider: magic}\n" + tool, `model.provider: unknown provider "magic"`},
		{"openai without name", "model: {provider: openai}\n" + tool, "model.name: required"},
		{"script without file", "model: {provider: script}\n" + tool, "model.script: required"},
		{"script missing", "model: {provider: script, script: nope.yaml}\n" + tool, "model.script"},
		{"script empty", "model: {provider: script, script: empty.yaml}\n" + tool, "model.script empty.yaml: no responses"},
		{"no tools", "model: {provider: test}\n", "tools: at least one"},
		{"unknown field", "model: {provider: test}\nmodle: 1\n" + tool, `unknown field "modle"`},
		{"bad type", "model: {provider: test}\nmax_model_requests: lots\n" + tool, "max_model_requests"},
		{"bad duration", "model: {provider: test}\ninline_wait: soon\n" + tool, "invalid duration"},
		{"bad tool name", "model: {provider: test}\ntools:\n  - name: a.b\n", "tools[0].name"},
		{"duplicate tool", "model: {provider: test}\ntools:\n  - name: t\n  - name: t\n", "tools[1] (t).name: duplicate"},
		{"bad cel", "model: {provider: test}\ntools:\n  - name: t\n    approval: args.path ==\n", "tools[0] (t).approval"},
		{"cel not bool", "model: {provider: test}\ntools:\n  - name: t\n    approval: '\"yes\"'\n", "want bool"},
		{"schema not object", "model: {provider: test}\ntools:\n  - name: t\n    parameters: {type: string}\n", "tools[0] (t).parameters"},
		{"metadata not object", "model: {provider: test}\ntools:\n  - name: t\n    approval_metadata: 3\n", "tools[0] (t).approval_metadata"},
		{"negative retries", "model: {provider: test, retries: -1}\n" + tool, "model.retries: -1 is outside [0, 20]"},
		{"negative backoff", "model: {provider: test, backoff: -1s}\n" + tool, "model.backoff: -1s is negative"},
		{"bad backoff", "model: {provider: test, backoff: soon}\n" + tool, "invalid duration"},
		{"negative deadline", "model: {provider: test}\ntools:\n  - name: t\n    deadline: -1s\n", "tools[0] (t).deadline"},
		{"unknown executor", "model: {provider: test}\ntools:\n  - name: t\n    executor: browser\n", `tools[0] (t).executor: "browser" is not an executor`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := agentconfig.Parse([]byte(tc.yaml), dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestExampleConfigsLoad(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"agent-seed-approval.yaml", "agent-seed-external.yaml", "agent-openai.yaml"} {
		if _, err := agentconfig.Load("../../examples/" + f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// The demo declares the tool-worker's built-in tools with the same
// descriptions and schemas; its other tools are the chat page's
// (executor: frontend).
func TestDemoToolsMatchWorkerBuiltins(t *testing.T) {
	t.Parallel()
	cfg, err := agentconfig.Demo()
	if err != nil {
		t.Fatal(err)
	}
	builtins := map[string]worker.ToolSpec{}
	for _, s := range worker.BuiltinTools() {
		builtins[s.Name] = s
	}
	for _, tool := range cfg.Tools {
		if tool.Executor == "frontend" {
			continue
		}
		b, ok := builtins[tool.Name]
		if !ok {
			t.Errorf("demo tool %s is no built-in", tool.Name)
			continue
		}
		if tool.Description != b.Description {
			t.Errorf("%s description = %q, built-in %q", tool.Name, tool.Description, b.Description)
		}
		var got, want any
		if err := json.Unmarshal(tool.Parameters, &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b.Parameters, &want); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s schema differs (-builtin +demo):\n%s", tool.Name, diff)
		}
	}
}

// model.script is a path from the config file's directory: "../" and an
// absolute path work as they would in a shell.
func TestScriptPathRelativeToTheConfig(t *testing.T) {
	t.Parallel()
	script, err := filepath.Abs("../../examples/seed-approval-script.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "configs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "..", "s.yaml"), []byte("- text: hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{script, "../s.yaml"} {
		file := filepath.Join(dir, "agent.yaml")
		cfg := "model: {provider: script, script: '" + path + "'}\ntools: [{name: t}]\n"
		if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		if c, err := agentconfig.Load(file); err != nil || len(c.Script) == 0 {
			t.Errorf("script %s: %v", path, err)
		}
	}
}

func TestDiscoverConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ yaml, want string }{
		{"model: {provider: test}\n", "at least one tool (or a discover: entry)"},
		{"model: {provider: test}\ndiscover:\n  - approval: always\n", "discover[0].tools: required"},
		{"model: {provider: test}\ndiscover:\n  - tools: \"[a-\"\n", "discover[0].tools: \"[a-\" is not a glob"},
		{"model: {provider: test}\ndiscover:\n  - tools: \"*\"\n    approval: \"args.x >\"\n", "discover[0].approval"},
		{"model: {provider: test}\ndiscover:\n  - tools: \"*\"\n    approval_metadata: [1]\n", "discover[0].approval_metadata: want an object"},
		{"model: {provider: test}\ndiscover:\n  - tools: \"*\"\n    deadline: -1s\n", "discover[0].deadline: must not be negative"},
		{"model: {provider: test}\ndiscover:\n  - tools: \"*\"\n    approve: always\n", `unknown field "approve"`},
	} {
		_, err := agentconfig.Parse([]byte(tt.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err = %v, want %q", tt.yaml, err, tt.want)
		}
	}
}
