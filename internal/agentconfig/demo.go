package agentconfig

import (
	"embed"
	"fmt"
	"io/fs"

	"github.com/toolgate/toolgate/internal/orchestrator"
)

//go:embed demo/agent.yaml demo/script.yaml
var demoFiles embed.FS

// Demo is the built-in demo agent, used when no agent config is
// given: the seed article's approval example with a script model. Tools:
// update_file (approval when the path is .env, reason "protected"),
// delete_file (approval always), read_file, calculate_answer and
// send_to_worker, with the schemas of the tool-worker's built-ins; and
// local_time and confirm, which the chat page answers (executor: frontend).
func Demo() (*orchestrator.AgentConfig, error) {
	data, dir, err := DemoSource()
	if err != nil {
		return nil, err
	}
	cfg, err := Parse(data, dir)
	if err != nil {
		return nil, fmt.Errorf("demo agent: %w", err)
	}
	return cfg, nil
}

// DemoSource is the demo agent's config file and the directory its script
// is read from, for a program that parses configs itself.
func DemoSource() ([]byte, fs.FS, error) {
	dir, err := fs.Sub(demoFiles, "demo")
	if err != nil {
		return nil, nil, fmt.Errorf("demo agent: %w", err)
	}
	data, err := fs.ReadFile(dir, "agent.yaml")
	if err != nil {
		return nil, nil, fmt.Errorf("demo agent: %w", err)
	}
	return data, dir, nil
}
