package worker_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

func TestBuiltin(t *testing.T) {
	t.Parallel()
	sandbox := filepath.Join(t.TempDir(), "sandbox")
	b, err := worker.NewBuiltin(sandbox)
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(filepath.Dir(sandbox), "outside.txt")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(sandbox), filepath.Join(sandbox, "up")); err != nil {
		t.Fatal(err)
	}

	// Steps share the sandbox, so they run in order.
	steps := []struct {
		name string
		tool string
		args string
		want wire.CallReply
	}{
		{"update", "update_file", `{"path":"README.md","content":"Hello, world!"}`,
			wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"File 'README.md' updated: 'Hello, world!'"`)}},
		{"read", "read_file", `{"path":"README.md"}`,
			wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"Hello, world!"`)}},
		{"update nested with a quote", "update_file", `{"path":"docs/it's.txt","content":"a\nb"}`,
			wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"File \"docs/it's.txt\" updated: 'a\\nb'"`)}},
		{"delete", "delete_file", `{"path":"README.md"}`,
			wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"File 'README.md' deleted"`)}},
		{"delete missing", "delete_file", `{"path":"README.md"}`,
			wire.CallReply{Outcome: wire.OutcomeFailed, Message: "File 'README.md' not found"}},
		{"absolute path refused", "read_file", `{"path":"` + outside + `"}`,
			wire.CallReply{Outcome: wire.OutcomeFailed}},
		{"dot-dot escape refused", "update_file", `{"path":"../outside.txt","content":"x"}`,
			wire.CallReply{Outcome: wire.OutcomeFailed, Message: "path '../outside.txt' is outside the sandbox"}},
		{"hidden dot-dot escape refused", "delete_file", `{"path":"docs/../../outside.txt"}`,
			wire.CallReply{Outcome: wire.OutcomeFailed, Message: "path 'docs/../../outside.txt' is outside the sandbox"}},
		{"symlink escape refused", "read_file", `{"path":"up/outside.txt"}`,
			wire.CallReply{Outcome: wire.OutcomeFailed, Message: "path 'up/outside.txt' is outside the sandbox"}},
		{"missing argument asks again", "update_file", `{"path":"a.txt"}`,
			wire.CallReply{Outcome: wire.OutcomeRetry, Message: "invalid arguments: missing content"}},
		{"unknown argument asks again", "read_file", `{"path":"a.txt","mode":"r"}`,
			wire.CallReply{Outcome: wire.OutcomeRetry}},
		{"calculate_answer", "calculate_answer", `{"question":"life, the universe and everything"}`,
			wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`42`)}},
		{"send_to_worker", "send_to_worker", `{"task":"backup README.md"}`,
			wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"Task 'backup README.md' completed"`)}},
		{"noop", "noop", `{"n": 1, "s": "x"}`,
			wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`{"n":1,"s":"x"}`)}},
		{"unknown tool", "format_disk", `{}`,
			wire.CallReply{Outcome: wire.OutcomeFailed, Message: `unknown built-in tool "format_disk"`}},
	}
	for _, s := range steps {
		got, err := b.Execute(t.Context(), callRequest(s.tool, s.args))
		if err != nil {
			t.Fatalf("%s: Execute: %v", s.name, err)
		}
		opts := []cmp.Option{}
		if s.want.Message == "" {
			opts = append(opts, cmpopts.IgnoreFields(wire.CallReply{}, "Message"))
		}
		if diff := cmp.Diff(s.want, got, opts...); diff != "" {
			t.Errorf("%s (-want +got):\n%s", s.name, diff)
		}
	}
	if data, err := os.ReadFile(outside); err != nil || string(data) != "secret" {
		t.Errorf("file outside the sandbox = %q, %v; want it untouched", data, err)
	}
	if data, err := os.ReadFile(filepath.Join(sandbox, "docs", "it's.txt")); err != nil || string(data) != "a\nb" {
		t.Errorf("nested file = %q, %v", data, err)
	}
}

func TestBuiltinToolsHaveSchemas(t *testing.T) {
	t.Parallel()
	specs := worker.BuiltinTools()
	names := map[string]bool{}
	for _, s := range specs {
		names[s.Name] = true
		var schema map[string]any
		if err := json.Unmarshal(s.Parameters, &schema); err != nil || schema["type"] != "object" {
			t.Errorf("%s: parameters %s are not an object schema (%v)", s.Name, s.Parameters, err)
		}
		if s.Description == "" {
			t.Errorf("%s: no description", s.Name)
		}
	}
	for _, n := range []string{"update_file", "delete_file", "read_file", "calculate_answer", "send_to_worker", "noop"} {
		if !names[n] {
			t.Errorf("BuiltinTools lacks %s", n)
		}
	}
	specs[0].Parameters[0] = 'X'
	if worker.BuiltinTools()[0].Parameters[0] == 'X' {
		t.Error("BuiltinTools shares its slices with callers")
	}
}
