package arch

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/toolgate/toolgate"

const natsServer = "github.com/nats-io/nats-server/"

// pkg is the part of `go list -json` output the rules need.
type pkg struct {
	ImportPath string
	Standard   bool
	Deps       []string // transitive, without test-only imports
}

// rule forbids packages at or under From to depend on anything matched by
// Forbidden, or, when AllowOnly is set, on any non-standard package not
// matched by it. Paths ending in "/" match by prefix, others exactly or as a
// parent directory.
type rule struct {
	From      string
	Forbidden []string
	AllowOnly []string
	// Except lists packages under From the rule does not apply to.
	Except []string
	Why    string
}

var rules = []rule{
	{
		From:      module + "/deferred",
		AllowOnly: []string{"github.com/vmihailenco/"},
		Why:       "deferred is the vocabulary: standard library and msgpack only",
	},
	{
		From:      module + "/agent",
		AllowOnly: []string{"github.com/vmihailenco/", module + "/internal/msgpackmap", module + "/deferred"},
		Why:       "agent is the vocabulary of a run, which programs import: standard library, msgpack and deferred only",
	},
	{
		From:      module + "/internal/deferred",
		AllowOnly: []string{"github.com/vmihailenco/", module + "/deferred"},
		Why:       "internal/deferred only names the public deferred's vocabulary",
	},
	{
		From: module + "/internal/agent",
		Forbidden: []string{
			module + "/internal/bus", module + "/internal/orchestrator", module + "/internal/worker",
			module + "/internal/approver", "github.com/nats-io/",
		},
		Why: "the agent loop knows nothing of NATS or the distributed parts",
	},
	{
		From: module + "/internal/bus",
		Forbidden: []string{
			module + "/internal/agent", module + "/internal/orchestrator", module + "/internal/worker",
			module + "/internal/approver",
		},
		Why: "the bus carries messages and holds no agent logic",
	},
	{
		From:      module + "/internal/orchestrator",
		Forbidden: []string{module + "/internal/agent/openai", "github.com/openai/", module + "/internal/agentconfig"},
		Why:       "the engine runs the model it is given: the choice of provider is internal/agentconfig's (and a main's)",
	},
	{
		From:      module + "/internal/conversation",
		Forbidden: []string{module + "/internal/orchestrator", module + "/internal/bus", "github.com/nats-io/"},
		Why:       "the conversation model does no I/O: the orchestrator stores it and carries out the effects its transitions return",
	},
	{
		From:      module + "/internal/worker",
		Forbidden: []string{module + "/internal/agent", module + "/internal/orchestrator"},
		Why:       "workers execute calls; they do not run agents",
	},
	{
		From:      module + "/internal/approver",
		Forbidden: []string{module + "/internal/agent", module + "/internal/orchestrator"},
		Why:       "approvers decide on calls; they do not run agents",
	},
	{
		From:      module + "/wire",
		AllowOnly: []string{"github.com/vmihailenco/", module + "/internal/msgpackmap", module + "/internal/deferred", module + "/deferred"},
		Why:       "the wire contract holds no connection and no server: standard library, msgpack (with internal/msgpackmap) and deferred only",
	},
	{
		From:      module + "/internal/bus",
		Forbidden: []string{natsServer},
		Except:    []string{module + "/internal/bus/embedded", module + "/internal/bus/bustest"},
		Why:       "the transport connects to a server; only internal/bus/embedded runs one",
	},
	{
		From:      module + "/worker",
		Forbidden: []string{natsServer, module + "/internal/agent", module + "/internal/orchestrator"},
		Why:       "the public worker connects to a server and runs no agent",
	},
	{
		From: module + "/worker",
		Forbidden: []string{
			module + "/internal/worker/command", module + "/internal/worker/webhook", module + "/internal/worker/mcpexec",
			module + "/internal/worker/builtin", "github.com/modelcontextprotocol/",
			"github.com/prometheus/", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters/", "github.com/goccy/go-yaml",
		},
		Except: []string{module + "/worker/prommetrics"},
		Why:    "a Go worker links no executor, exporter or metrics client of its own: a main passes them in (TestOneToolWorkerIsLight)",
	},
	{
		From:      module + "/approval",
		Forbidden: []string{natsServer, module + "/internal/agent", module + "/internal/orchestrator"},
		Why:       "approval bots connect to a server and run no agent",
	},
	{
		From:      module + "/client",
		Forbidden: []string{"github.com/nats-io/", module + "/internal/orchestrator", module + "/internal/agent"},
		Why:       "the client speaks HTTP only",
	},
	{
		From:      module + "/cmd/tool-worker",
		Forbidden: []string{natsServer},
		Why:       "workers connect to a server; they do not link one",
	},
	{
		From:      module + "/cmd/approver",
		Forbidden: []string{natsServer},
		Why:       "approvers connect to a server; they do not link one",
	},
	{
		From:      module + "/",
		Forbidden: []string{module + "/cmd/"},
		Why:       "binaries are leaves; nothing imports cmd/*",
	},
}

func matches(path, pattern string) bool {
	if strings.HasSuffix(pattern, "/") {
		return strings.HasPrefix(path, pattern)
	}
	return path == pattern || strings.HasPrefix(path, pattern+"/")
}

// violations lists every dependency that breaks a rule, as
// "importer -> dependency: why".
func violations(pkgs []pkg) []string {
	standard := map[string]bool{}
	for _, p := range pkgs {
		if p.Standard {
			standard[p.ImportPath] = true
		}
	}
	var out []string
	for _, p := range pkgs {
		for _, r := range rules {
			if !matches(p.ImportPath, r.From) || slices.ContainsFunc(r.Except, func(e string) bool { return matches(p.ImportPath, e) }) {
				continue
			}
			for _, d := range p.Deps {
				bad := slices.ContainsFunc(r.Forbidden, func(f string) bool { return matches(d, f) })
				if r.AllowOnly != nil && !standard[d] && !matches(d, r.From) {
					bad = bad || !slices.ContainsFunc(r.AllowOnly, func(a string) bool { return matches(d, a) })
				}
				if bad {
					out = append(out, p.ImportPath+" -> "+d+": "+r.Why)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list packages: %v", err)
	}
	// -e: a package another change has left broken still lists its imports.
	cmd := exec.Command(goBin, "list", "-e", "-deps", "-json=ImportPath,Standard,Deps", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(outb))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestDependencyDirection(t *testing.T) {
	pkgs := listPackages(t)
	if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.ImportPath == module+"/deferred" }) {
		t.Fatalf("go list did not report %s/deferred; the rules would check nothing", module)
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

func TestViolationsFindsBadEdges(t *testing.T) {
	t.Parallel()
	pkgs := []pkg{
		{ImportPath: "fmt", Standard: true},
		{ImportPath: "encoding/json", Standard: true},
		{ImportPath: module + "/deferred", Deps: []string{"fmt", "encoding/json", "github.com/vmihailenco/msgpack/v5", "github.com/google/uuid"}},
		{ImportPath: module + "/internal/agent/openai", Deps: []string{module + "/internal/deferred", "github.com/nats-io/nats.go"}},
		{ImportPath: module + "/internal/agent", Deps: []string{module + "/internal/deferred", module + "/internal/bus"}},
		{ImportPath: module + "/internal/bus", Deps: []string{module + "/internal/deferred"}},
		{ImportPath: module + "/internal/worker", Deps: []string{module + "/internal/bus", module + "/internal/orchestrator"}},
		{ImportPath: module + "/internal/approver", Deps: []string{module + "/internal/bus"}},
		{ImportPath: module + "/internal/orchestrator", Deps: []string{module + "/internal/agent", module + "/internal/bus", module + "/cmd/orchestrator"}},
		{ImportPath: module + "/cmd/orchestrator", Deps: []string{module + "/internal/orchestrator"}},
		{ImportPath: module + "/wire", Deps: []string{module + "/internal/deferred", "github.com/vmihailenco/msgpack/v5", "github.com/nats-io/nats.go"}},
		{ImportPath: module + "/cmd/tool-worker", Deps: []string{module + "/internal/bus", "github.com/nats-io/nats-server/v2/server"}},
		{ImportPath: module + "/internal/bus/embedded", Deps: []string{module + "/internal/bus", "github.com/nats-io/nats-server/v2/server"}},
	}
	got := violations(pkgs)
	want := []string{
		module + "/cmd/tool-worker -> github.com/nats-io/nats-server/v2/server: workers connect to a server; they do not link one",
		module + "/deferred -> github.com/google/uuid: deferred is the vocabulary: standard library and msgpack only",
		module + "/internal/agent -> " + module + "/internal/bus: the agent loop knows nothing of NATS or the distributed parts",
		module + "/internal/agent/openai -> github.com/nats-io/nats.go: the agent loop knows nothing of NATS or the distributed parts",
		module + "/internal/orchestrator -> " + module + "/cmd/orchestrator: binaries are leaves; nothing imports cmd/*",
		module + "/internal/worker -> " + module + "/internal/orchestrator: workers execute calls; they do not run agents",
		module + "/wire -> github.com/nats-io/nats.go: the wire contract holds no connection and no server: standard library, msgpack (with internal/msgpackmap) and deferred only",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n got %q\nwant %q", got, want)
	}
}
