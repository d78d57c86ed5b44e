package worker_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A Go worker links only what serving calls needs. A raw JetStream
// consumer links some 25 non-standard packages into some 10 MB; a worker
// adds msgpack (the wire), the OpenTelemetry trace API (no SDK, no
// exporter) and the schema reflector of typed tools, some 30 packages and
// 2 MB. The bounds leave room for that and little more: an executor (the
// MCP SDK), an exporter (OTLP over gRPC and its protobuf), the Prometheus
// client or a YAML parser each crosses one of them, as all of them did when
// the worker wrapped tool-worker's engine (284 packages, 28 MB).
const (
	maxWorkerPackages = 60
	maxWorkerBytes    = 15 << 20
)

// heavy are packages a one-tool worker must not link, named so that a
// failure says what came in.
var heavy = []string{
	"github.com/modelcontextprotocol/",
	"google.golang.org/grpc",
	"google.golang.org/protobuf",
	"github.com/prometheus/",
	"github.com/goccy/go-yaml",
	"go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters/",
	"github.com/nats-io/nats-server/",
	"github.com/santhosh-tekuri/",
}

// TestOneToolWorkerIsLight builds testdata/onetool, a main serving one
// typed tool, with default flags and holds it to the bounds above.
func TestOneToolWorkerIsLight(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the worker: %v", err)
	}
	const main = "./testdata/onetool"
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", main).Output()
	if err != nil {
		t.Fatalf("go list: %v", errText(err))
	}
	var deps []string
	for p := range strings.Lines(string(out)) {
		p = strings.TrimSpace(p)
		if p != "" && !strings.HasSuffix(p, "/worker/testdata/onetool") {
			deps = append(deps, p)
		}
	}
	for _, p := range deps {
		for _, h := range heavy {
			if strings.HasPrefix(p, h) {
				t.Errorf("the worker links %s", p)
				break
			}
		}
	}
	if len(deps) > maxWorkerPackages {
		t.Errorf("a one-tool worker links %d non-standard packages, want at most %d:\n%s", len(deps), maxWorkerPackages, strings.Join(deps, "\n"))
	}

	bin := filepath.Join(t.TempDir(), "onetool")
	if out, err := exec.Command(goBin, "build", "-o", bin, main).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() >= maxWorkerBytes {
		t.Errorf("a one-tool worker is %.1f MB, want under %d MB", float64(fi.Size())/(1<<20), maxWorkerBytes>>20)
	}
	t.Logf("one-tool worker: %d non-standard packages, %.1f MB", len(deps), float64(fi.Size())/(1<<20))
}

func errText(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return err.Error() + ": " + string(ee.Stderr)
	}
	return err.Error()
}
