package agentconfig_test

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/agentconfig"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

const agentFileDoc = "../../docs/agent-file.md"

// docs/agent-file.md is the reference of the agent file: every field the
// decoder accepts has a row in its tables, so a field added to the config
// cannot stay known only to the examples.
func TestAgentFileDocListsEveryField(t *testing.T) {
	b, err := os.ReadFile(agentFileDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, c := range []struct {
		prefix string
		typ    reflect.Type
	}{
		{"", reflect.TypeFor[orchestrator.AgentConfig]()},
		{"model.", reflect.TypeFor[orchestrator.ModelConfig]()},
		{"", reflect.TypeFor[orchestrator.ToolConfig]()},
		{"", reflect.TypeFor[orchestrator.DiscoverConfig]()},
	} {
		checkFieldsDocumented(t, doc, c.prefix, c.typ)
	}
}

func checkFieldsDocumented(t *testing.T, doc, prefix string, typ reflect.Type) {
	t.Helper()
	for f := range typ.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		if !strings.Contains(doc, "| `"+prefix+name+"` |") {
			t.Errorf("%s has no row for `%s%s` (%s.%s)", agentFileDoc, prefix, name, typ.Name(), f.Name)
		}
	}
}

// Every agent file shown in docs/agent-file.md and in the README's first
// agent is one the orchestrator takes; script paths are read from
// examples/.
func TestAgentFileDocExamplesParse(t *testing.T) {
	for page, want := range map[string]int{agentFileDoc: 2, "../../README.md": 1} {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1)
		n := 0
		for _, m := range blocks {
			if !strings.Contains(m[1], "model:") {
				continue
			}
			n++
			if _, err := agentconfig.Parse([]byte(m[1]), os.DirFS("../../examples")); err != nil {
				t.Errorf("agent file in %s does not load: %v\n%s", page, err, m[1])
			}
		}
		if n < want {
			t.Errorf("%s shows %d agent files, want at least %d", page, n, want)
		}
	}
}
