package orchestrator

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
)

// syncBuffer is a log sink safe for the grace's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Started before its workers, as documented, the orchestrator does not
// warn about every configured tool at once: the tools still unadvertised
// after the grace are warned about, once each, and those a worker
// advertised meanwhile are not.
func TestAdvertWarningsWaitForTheWorkersAtStart(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	obj := json.RawMessage(`{"type":"object"}`)
	cfg := &AgentConfig{
		Model: ModelConfig{Provider: "test"},
		Tools: []ToolConfig{{Name: "update_file", Parameters: obj}, {Name: "delete_file", Parameters: obj}, {Name: "read_file", Parameters: obj}},
		ModelFunc: func(func(string) (string, bool), *slog.Logger) (agent.Model, error) {
			return agent.NewTestModel(), nil
		},
	}
	o, err := New(Config{Bus: &bus.Bus{}, Agent: cfg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var graceOver func()
	var grace time.Duration
	o.discovery.warnings.afterFunc = func(d time.Duration, f func()) func() bool {
		grace, graceOver = d, f
		return func() bool { return true }
	}
	o.discovery.catalogue = newCatalogue(o.log, nil)
	o.discovery.catalogue.tools["read_file"] = advertised(t, "read_file", `{"type":"object"}`)

	close(o.discovery.catalogue.caughtUp)
	o.discovery.advertChanged("", nil, true)
	if strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("warned at start-up, before the workers had a chance:\n%s", logs.String())
	}
	if graceOver == nil || grace != advertGrace {
		t.Fatalf("no grace armed (%s)", grace)
	}
	// A worker comes and advertises update_file within the grace.
	o.discovery.advertChanged("update_file", &AdvertisedTool{}, false)
	graceOver()
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 1 || !strings.Contains(out, "tool=delete_file") {
		t.Errorf("after the grace, want one warning, about delete_file:\n%s", out)
	}
	// It is not repeated while the tool stays missing.
	o.discovery.advertChanged("delete_file", nil, false)
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("warned again about a tool already warned about:\n%s", logs.String())
	}
}
