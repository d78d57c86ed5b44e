package worker_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// script writes an executable shell script into a temporary folder.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tool.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func callRequest(tool, args string) wire.CallRequest {
	return wire.CallRequest{
		RunID:          "run1",
		ConversationID: "conv1",
		ToolCallID:     "call1",
		ToolName:       tool,
		Args:           json.RawMessage(args),
		Deadline:       time.Now().Add(time.Minute),
		Attempt:        1,
	}
}

func TestCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		want   wire.CallReply
	}{
		{
			name:   "json value",
			script: `echo '{"answer": 42}'`,
			want:   wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`{"answer":42}`)},
		},
		{
			name:   "non-json stdout is a string",
			script: `echo "File 'a.txt' deleted"`,
			want:   wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"File 'a.txt' deleted"`)},
		},
		{
			name:   "request on stdin",
			script: `cat`,
			want: wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(
				`{"run_id":"run1","conversation_id":"conv1","tool_call_id":"call1","tool_name":"echo","args":{"x":1},"deadline":"DEADLINE","attempt":1}`)},
		},
		{
			name:   "environment",
			script: `printf '%s|%s|%s' "$TOOLGATE_RUN_ID" "$TOOLGATE_TOOL_CALL_ID" "$TOOLGATE_IDEMPOTENCY_KEY"`,
			want:   wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"run1|call1|run1:call1"`)},
		},
		{
			name:   "tool-return form",
			script: `echo '{"kind":"tool-return","return_value":"ok","content":"extra","metadata":{"k":"v"}}'`,
			want:   wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"ok"`), Content: "extra", Metadata: json.RawMessage(`{"k":"v"}`)},
		},
		{
			name:   "model-retry form",
			script: `echo '{"kind":"model-retry","message":"ask again"}'`,
			want:   wire.CallReply{Outcome: wire.OutcomeRetry, Message: "ask again"},
		},
		{
			name:   "tool-failed form",
			script: `echo '{"kind":"tool-failed","message":"no luck"}'`,
			want:   wire.CallReply{Outcome: wire.OutcomeFailed, Message: "no luck"},
		},
		{
			name:   "exit 75 retries with stdout",
			script: "echo 'use a smaller number'\nexit 75",
			want:   wire.CallReply{Outcome: wire.OutcomeRetry, Message: "use a smaller number"},
		},
		{
			name:   "exit 75 retries with stderr when stdout is empty",
			script: "echo 'rate limited' >&2\nexit 75",
			want:   wire.CallReply{Outcome: wire.OutcomeRetry, Message: "rate limited"},
		},
		{
			name:   "exit 75 with a model-retry form",
			script: "echo '{\"kind\":\"model-retry\",\"message\":\"m\"}'\nexit 75",
			want:   wire.CallReply{Outcome: wire.OutcomeRetry, Message: "m"},
		},
		{
			name:   "failure with stderr",
			script: "echo partial\necho 'line 1' >&2\necho 'disk full' >&2\nexit 3",
			want:   wire.CallReply{Outcome: wire.OutcomeFailed, Message: "line 1\ndisk full"},
		},
		{
			name:   "failure without stderr",
			script: "exit 2",
			want:   wire.CallReply{Outcome: wire.OutcomeFailed, Message: "exit status 2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cmd := &worker.Command{Argv: []string{script(t, tt.script)}}
			req := callRequest("echo", `{"x": 1}`)
			got, err := cmd.Execute(t.Context(), req)
			if err != nil {
				t.Fatalf("Execute: %v", err)
			}
			deadline, _ := json.Marshal(req.Deadline)
			if tt.want.Value != nil {
				tt.want.Value = json.RawMessage(strings.ReplaceAll(string(tt.want.Value), `"DEADLINE"`, string(deadline)))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCommandStderrTail(t *testing.T) {
	t.Parallel()
	cmd := &worker.Command{Argv: []string{script(t, `
i=0
while [ $i -lt 500 ]; do echo "noise line $i" >&2; i=$((i+1)); done
echo 'the real cause' >&2
exit 1`)}}
	got, err := cmd.Execute(t.Context(), callRequest("t", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != wire.OutcomeFailed || !strings.HasSuffix(got.Message, "the real cause") || len(got.Message) > 2048 {
		t.Errorf("got outcome %q, message of %d bytes ending %q; want failed, ≤ 2 KiB, ending with the last line",
			got.Outcome, len(got.Message), got.Message[max(0, len(got.Message)-40):])
	}
}

func TestCommandTimeout(t *testing.T) {
	t.Parallel()
	// The background child keeps stdout open: the process group must die too.
	cmd := &worker.Command{Argv: []string{script(t, "sleep 30 &\nsleep 30")}}
	req := callRequest("slow", `{}`)
	req.Deadline = time.Now().Add(300 * time.Millisecond)
	start := time.Now()
	got, err := cmd.Execute(t.Context(), req)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if diff := cmp.Diff(wire.CallReply{Outcome: wire.OutcomeFailed, Message: "timed out"}, got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v; the process was not killed at the deadline", took)
	}
}

func TestCommandCanceledIsInfrastructureError(t *testing.T) {
	t.Parallel()
	cmd := &worker.Command{Argv: []string{script(t, "sleep 30")}}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	got, err := cmd.Execute(ctx, callRequest("slow", `{}`))
	if err == nil {
		t.Fatalf("Execute = %+v, nil; want an error so the call is released", got)
	}
}

func TestCommandMissingProgramFails(t *testing.T) {
	t.Parallel()
	cmd := &worker.Command{Argv: []string{filepath.Join(t.TempDir(), "missing")}}
	got, err := cmd.Execute(t.Context(), callRequest("t", `{}`))
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	if got.Outcome != wire.OutcomeFailed {
		t.Errorf("outcome = %q, want failed", got.Outcome)
	}
}

func TestCommandOutputLimit(t *testing.T) {
	t.Parallel()
	cmd := &worker.Command{Argv: []string{script(t, `head -c 5000 /dev/zero | tr '\0' a`)}, MaxOutput: 1000}
	got, err := cmd.Execute(t.Context(), callRequest("t", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != wire.OutcomeFailed || !strings.Contains(got.Message, "1000") {
		t.Errorf("got %+v, want failed for output over 1000 bytes", got)
	}
}

func TestNewCommand(t *testing.T) {
	t.Parallel()
	cmd, err := worker.NewCommand(`sh -c 'cat >/dev/null; echo "{\"ok\": true}"'`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cmd.Execute(t.Context(), callRequest("t", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`{"ok":true}`)}, got); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	if _, err := worker.NewCommand("   "); err == nil {
		t.Error("NewCommand of blanks: want an error")
	}
}

func TestNewCommandRefusesAProgramThatCannotRun(t *testing.T) {
	t.Parallel()
	notExecutable := filepath.Join(t.TempDir(), "tool.sh")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\necho {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, command := range []string{"/no/such/program", "no-such-program-on-path --flag", notExecutable} {
		if _, err := worker.NewCommand(command); err == nil {
			t.Errorf("NewCommand(%q) = nil error, want the program refused", command)
		}
	}
}

func TestCommandDoesNotLeakWorkerSettings(t *testing.T) {
	t.Setenv("TOOLGATE_NATS_PASSWORD", "secret")
	t.Setenv("TOOLGATE_TEST_KEPT_OUT", "x")
	t.Setenv("WORKER_TEST_INHERITED", "yes")
	cmd := &worker.Command{Argv: []string{script(t, `printf '%s|%s|%s' "$TOOLGATE_NATS_PASSWORD" "$WORKER_TEST_INHERITED" "$TOOLGATE_RUN_ID"`)}}
	got, err := cmd.Execute(t.Context(), callRequest("t", `{}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Value) != `"|yes|run1"` {
		t.Errorf("value = %s, want the password hidden, other variables inherited", got.Value)
	}
}
