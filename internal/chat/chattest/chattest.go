// Package chattest is the rig of the chat adapters' tests: an orchestrator
// of scripted agents, a worker of the builtin file tools over a temporary
// directory, and the npm clients the tests drive with node.
package chattest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/internal/worker"
	"github.com/toolgate/toolgate/wire"
)

// FilesAgent is an agent "files" of the update_file and delete_file
// approvals and the frontend tool local_time, scripted by FilesScript
// (script.yaml): one batch of the three calls, then texts.
const FilesAgent = `
name: files
model: {provider: script, script: script.yaml}
tools:
  - name: update_file
    parameters: {type: object, properties: {path: {type: string}, content: {type: string}}, required: [path, content]}
    approval: always
  - name: delete_file
    parameters: {type: object, properties: {path: {type: string}}, required: [path]}
    approval: always
    approval_metadata: {reason: destructive}
  - name: local_time
    executor: frontend
`

// FilesScript is FilesAgent's script.yaml.
const FilesScript = `
- calls:
    - {tool: update_file, id: upd, args: {path: a.txt, content: from the model}}
    - {tool: delete_file, id: del, args: {path: b.txt}}
    - {tool: local_time, id: time, args: {}}
- text: done
- text: nothing else
`

// OtherAgent is a second agent, whose one call is an approval of its own:
// its approval is no approval of FilesAgent's conversations. Its script
// (other.yaml) is OtherScript.
const OtherAgent = `
name: other
model: {provider: script, script: other.yaml}
tools:
  - {name: wipe, approval: always}
`

// OtherScript is OtherAgent's other.yaml.
const OtherScript = `
- calls: [{tool: wipe, id: other_call, args: {}}]
- text: wiped
`

// SlowAgent is an agent "slow" whose first response streams a text and
// calls slow, the tool of the worker Slow starts; its script (slow.yaml) is
// SlowScript.
const SlowAgent = `
name: slow
model: {provider: script, script: slow.yaml}
tools:
  - name: slow
    parameters: {type: object, properties: {}}
`

// SlowScript is SlowAgent's slow.yaml: the text and the call, then a text
// for the follow-up and one for the next prompt.
const SlowScript = `
- text: Let me look into it for you
  calls: [{tool: slow, id: slow_call, args: {}}]
- text: found it
- text: again done
`

// Slow starts a worker "slow" on sys of the tool slow, whose calls return
// "the answer" once release is called: a run that calls it is still going
// until then.
func Slow(ctx context.Context, t testing.TB, sys *testkit.System) (release func()) {
	t.Helper()
	ch := make(chan struct{})
	slow := worker.ExecutorFunc(func(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
		select {
		case <-ch:
		case <-ctx.Done():
			return wire.CallReply{}, ctx.Err()
		}
		return wire.CallReply{Outcome: wire.OutcomeReturn, Value: json.RawMessage(`"the answer"`)}, nil
	})
	if _, err := sys.Worker(ctx, "slow", worker.Config{Tools: []worker.Tool{{Spec: worker.ToolSpec{Name: "slow"}, Executor: slow}}}); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// Agent parses the agent config src whose model scripts are scripts (file
// name to content).
func Agent(t testing.TB, src string, scripts map[string]string) *orchestrator.AgentConfig {
	t.Helper()
	dir := fstest.MapFS{}
	for name, data := range scripts {
		dir[name] = &fstest.MapFile{Data: []byte(data)}
	}
	cfg, err := agentconfig.Parse([]byte(src), dir)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Demo is the demo agent (agentconfig.Demo).
func Demo(t testing.TB) *orchestrator.AgentConfig {
	t.Helper()
	cfg, err := agentconfig.Demo()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Orchestrator starts an orchestrator "orch" of agents on sys: one agent
// as its only agent, more as its agent set.
func Orchestrator(ctx context.Context, t testing.TB, sys *testkit.System, agents ...*orchestrator.AgentConfig) *testkit.Orchestrator {
	t.Helper()
	cfg := orchestrator.Config{ReconcileInterval: time.Second}
	if len(agents) == 1 {
		cfg.Agent = agents[0]
	} else {
		cfg.Agents = agents
	}
	o, err := sys.Orchestrator(ctx, "orch", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// Files starts a worker "files" on sys of the builtin tools named (every
// one when none) over a new temporary directory holding files (name to
// content), and returns the directory.
func Files(ctx context.Context, t testing.TB, sys *testkit.System, files map[string]string, tools ...string) string {
	t.Helper()
	box := t.TempDir()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(box, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := testkit.BuiltinTools(box, tools...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Worker(ctx, "files", worker.Config{Tools: ts}); err != nil {
		t.Fatal(err)
	}
	return box
}

type install struct {
	once sync.Once
	dir  string
	err  error
}

var (
	installsMu sync.Mutex
	installs   = map[string]*install{}
)

// Modules is the node_modules of the npm package set scripts/<set>,
// installed by scripts/ensure-<set>.sh (make test-deps) into
// .cache/npm-<set> when missing. what names the tests for the error when
// node is missing: a machine without node fails the test, it never skips.
func Modules(t testing.TB, set, what string) string {
	t.Helper()
	installsMu.Lock()
	in := installs[set]
	if in == nil {
		in = &install{}
		installs[set] = in
	}
	installsMu.Unlock()
	in.once.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", "..", ".."))
		if err != nil {
			in.err = err
			return
		}
		if _, err := exec.LookPath("node"); err != nil {
			in.err = fmt.Errorf("node is not on PATH: %s need Node.js and npm (make test-deps)", what)
			return
		}
		script := "ensure-" + set + ".sh"
		if out, err := exec.Command(filepath.Join(root, "scripts", script)).CombinedOutput(); err != nil {
			in.err = fmt.Errorf("scripts/%s: %v\n%s", script, err, out)
			return
		}
		in.dir = filepath.Join(root, ".cache", "npm-"+set, "node_modules")
	})
	if in.err != nil {
		t.Fatal(in.err)
	}
	return in.dir
}

// Node runs the node script with input as JSON on its stdin and returns
// the lines it printed. nodePath, when set, is its NODE_PATH. A script
// that fails fails the test with its stderr.
func Node(ctx context.Context, t testing.TB, script, nodePath string, input any) [][]byte {
	t.Helper()
	raw, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "node", script)
	if nodePath != "" {
		cmd.Env = append(os.Environ(), "NODE_PATH="+nodePath)
	}
	cmd.Stdin = bytes.NewReader(raw)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("client script: %v\n%s", err, stderr.String())
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		lines = append(lines, bytes.Clone(sc.Bytes()))
	}
	return lines
}

// SeedDone checks the end of the seed's conversation conv on the demo
// agent over box: the files as its approvals left them (the delete denied,
// the .env update approved) and the conversation completed, a run taking
// the prompt backup. It returns the conversation.
func SeedDone(ctx context.Context, t testing.TB, o *testkit.Orchestrator, box, conv, backup string) *conversation.State {
	t.Helper()
	for name, want := range map[string]string{"__init__.py": "# package\n", "README.md": "Hello, world!", ".env": ""} {
		if got, err := os.ReadFile(filepath.Join(box, name)); err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
	c, err := o.Conversation(ctx, conv)
	if err != nil {
		t.Fatal(err)
	}
	prompted := false
	for _, r := range c.Runs {
		prompted = prompted || r.Prompt == backup
	}
	if c.Status != conversation.StatusCompleted || !prompted {
		t.Errorf("conversation %s, the backup prompt in a run: %v", c.Status, prompted)
	}
	return c
}
