package orchestrator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/toolgate/toolgate/internal/agent"
)

// Model providers an agent config may name.
const (
	ProviderOpenAI = "openai" // an OpenAI-compatible chat completions endpoint
	ProviderScript = "script" // plays a list of responses from a file (offline)
	ProviderTest   = "test"   // calls every tool once, then answers (offline)
)

// Approval modes besides a CEL expression.
const (
	ApprovalNever  = "never"
	ApprovalAlways = "always"
)

// Default deadlines of a deferred call, when its tool sets none.
const (
	DefaultApprovalDeadline = 10 * time.Minute
	DefaultCallDeadline     = 5 * time.Minute
)

// AgentConfig describes the agent the orchestrator runs: its model, its
// instructions and its tools. Every tool is executed by a tool-worker; an
// approval rule decides which calls first need a decision.
type AgentConfig struct {
	// Name names the agent (POST /v1/runs {"agent"}); loaded from a file
	// without one, it is the file's base name.
	Name         string      `json:"name,omitempty"`
	Model        ModelConfig `json:"model"`
	Instructions string      `json:"instructions,omitempty"`
	// InlineWait is how long a run waits, inside the run, for the replies of
	// its deferred calls before it pauses. Zero (the default) pauses at once.
	InlineWait Duration `json:"inline_wait,omitempty"`
	// MaxModelRequests bounds the model calls of one run. Zero means the
	// agent's default.
	MaxModelRequests int          `json:"max_model_requests,omitempty"`
	Tools            []ToolConfig `json:"tools,omitempty"`
	// Discover offers the model the tools workers advertise whose names
	// match an entry (the first that matches decides); a tool listed under
	// Tools is the configured one.
	Discover []DiscoverConfig `json:"discover,omitempty"`

	// Script holds the responses of a script model, read from Model.Script.
	Script []agent.ScriptResponse `json:"-"`
}

// ModelConfig names the model behind the agent.
type ModelConfig struct {
	Provider string `json:"provider"`
	Name     string `json:"name,omitempty"`
	BaseURL  string `json:"base_url,omitempty"`
	// APIKeyEnv names the environment variable that holds the API key. The
	// orchestrator looks it up through Config.LookupEnv.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// APIKey is set by the program (never read from a file).
	APIKey string `json:"-"`
	// Script is a JSON or YAML file with a list of responses (the conformance
	// RESPONSE shape), relative to the config file.
	Script string `json:"script,omitempty"`
	// Stream asks the provider for streamed responses where it supports them.
	Stream bool `json:"stream,omitempty"`
}

// ToolConfig declares one tool the model may call.
type ToolConfig struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"` // JSON Schema of the args object
	// Approval is "never" (the default), "always", or a CEL expression over
	// `args` (and `tool`) that is true when the call needs a decision.
	Approval string `json:"approval,omitempty"`
	// ApprovalMetadata goes with an approval request as its reason.
	ApprovalMetadata json.RawMessage `json:"approval_metadata,omitempty"`
	// Deadline bounds how long a deferred call of this tool may stay pending.
	// Defaults to DefaultApprovalDeadline for approvals and
	// DefaultCallDeadline for external calls.
	Deadline Duration `json:"deadline,omitempty"`
	// CallDeadline, when set, overrides Deadline for external calls.
	CallDeadline Duration `json:"call_deadline,omitempty"`

	approval *approvalRule
	// Set for a discovered tool: its schema digest and MCP server.
	digest    string
	mcpServer string
}

// DiscoverConfig offers advertised tools whose names match Tools, with an
// approval rule and deadlines as a configured tool has them.
type DiscoverConfig struct {
	// Tools is a glob over tool names (path.Match: *, ?, [a-z]).
	Tools            string          `json:"tools"`
	Approval         string          `json:"approval,omitempty"`
	ApprovalMetadata json.RawMessage `json:"approval_metadata,omitempty"`
	Deadline         Duration        `json:"deadline,omitempty"`
	CallDeadline     Duration        `json:"call_deadline,omitempty"`

	approval *approvalRule
}

// deadline returns how long a call of this kind may stay pending; a nil
// tool (one the config does not know) gets the defaults.
func (t *ToolConfig) deadline(approval bool) time.Duration {
	if t == nil {
		if approval {
			return DefaultApprovalDeadline
		}
		return DefaultCallDeadline
	}
	if !approval && t.CallDeadline > 0 {
		return t.CallDeadline.D()
	}
	if t.Deadline > 0 {
		return t.Deadline.D()
	}
	if approval {
		return DefaultApprovalDeadline
	}
	return DefaultCallDeadline
}

// Duration is a time.Duration written as a Go duration string ("90s", "10m")
// or as a number of seconds.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid duration %q", s)
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("invalid duration %s: want a string like \"90s\" or a number of seconds", b)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// LoadAgentConfig reads an agent config from a YAML or JSON file (by its
// extension; anything but .json is read as YAML), loads its script file and
// compiles its approval rules.
func LoadAgentConfig(path string) (*AgentConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	cfg, err := ParseAgentConfig(data, strings.EqualFold(filepath.Ext(path), ".json"), osDir(filepath.Dir(path)))
	if err != nil {
		return nil, fmt.Errorf("agent config %s: %w", path, err)
	}
	return cfg, nil
}

// osDir opens files by operating-system path: an absolute path as it is, a
// relative one (".." included) from the directory. os.DirFS would refuse
// both, and a script beside a shared config is a natural place.
type osDir string

func (d osDir) Open(name string) (fs.File, error) {
	if !filepath.IsAbs(name) {
		name = filepath.Join(string(d), name)
	}
	return os.Open(name)
}

// ParseAgentConfig parses and validates an agent config. A script file is
// read from dir (the config file's directory); dir may be nil when the config
// names no script.
func ParseAgentConfig(data []byte, isJSON bool, dir fs.FS) (*AgentConfig, error) {
	raw := data
	if !isJSON {
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return nil, fmt.Errorf("yaml: %s", yaml.FormatError(err, false, false))
		}
		raw = j
	}
	var cfg AgentConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, describeDecodeError(err)
	}
	if cfg.Model.Script != "" && cfg.Model.Provider == ProviderScript {
		if dir == nil {
			return nil, fmt.Errorf("model.script: no directory to read %q from", cfg.Model.Script)
		}
		b, err := fs.ReadFile(dir, filepath.ToSlash(filepath.Clean(cfg.Model.Script)))
		if err != nil {
			return nil, fmt.Errorf("model.script: %w", err)
		}
		script, err := agent.ParseScript(b)
		if err == nil && len(script) == 0 {
			err = errors.New("no responses")
		}
		if err != nil {
			return nil, fmt.Errorf("model.script %s: %w", cfg.Model.Script, err)
		}
		cfg.Script = script
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}

func describeDecodeError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("%s: cannot use a JSON %s here (want %s)", te.Field, te.Value, te.Type)
	}
	// DisallowUnknownFields reports `json: unknown field "x"`.
	return fmt.Errorf("decode: %s", strings.TrimPrefix(err.Error(), "json: "))
}

// validate checks the config and compiles the approval rules; every error
// names the field.
func (c *AgentConfig) validate() error {
	switch c.Model.Provider {
	case ProviderOpenAI:
		if c.Model.Name == "" {
			return errors.New("model.name: required for the openai provider")
		}
	case ProviderScript:
		if c.Model.Script == "" && len(c.Script) == 0 {
			return errors.New("model.script: required for the script provider")
		}
	case ProviderTest:
	case "":
		return errors.New("model.provider: required (openai, script or test)")
	default:
		return fmt.Errorf("model.provider: unknown provider %q (want openai, script or test)", c.Model.Provider)
	}
	if c.InlineWait < 0 {
		return errors.New("inline_wait: must not be negative")
	}
	if c.MaxModelRequests < 0 {
		return errors.New("max_model_requests: must not be negative")
	}
	if len(c.Tools) == 0 && len(c.Discover) == 0 {
		return errors.New("tools: at least one tool (or a discover: entry) is required")
	}
	for i := range c.Discover {
		d := &c.Discover[i]
		field := fmt.Sprintf("discover[%d]", i)
		if d.Tools == "" {
			return fmt.Errorf("%s.tools: required (a glob over tool names, such as \"get-*\" or \"*\")", field)
		}
		if _, err := path.Match(d.Tools, ""); err != nil {
			return fmt.Errorf("%s.tools: %q is not a glob: %w", field, d.Tools, err)
		}
		meta, err := objectOrNil(d.ApprovalMetadata)
		if err != nil {
			return fmt.Errorf("%s.approval_metadata: want an object: %w", field, err)
		}
		d.ApprovalMetadata = meta
		if d.Deadline < 0 || d.CallDeadline < 0 {
			return fmt.Errorf("%s.deadline: must not be negative", field)
		}
		if d.approval, err = compileApproval(d.Approval); err != nil {
			return fmt.Errorf("%s.approval: %w", field, err)
		}
	}
	seen := make(map[string]bool, len(c.Tools))
	for i := range c.Tools {
		t := &c.Tools[i]
		field := fmt.Sprintf("tools[%d]", i)
		if !toolNameRE.MatchString(t.Name) {
			return fmt.Errorf("%s.name: %q is not a tool name (letters, digits, _ and -, at most 64)", field, t.Name)
		}
		field = fmt.Sprintf("tools[%d] (%s)", i, t.Name)
		if seen[t.Name] {
			return fmt.Errorf("%s.name: duplicate tool name", field)
		}
		seen[t.Name] = true
		if len(t.Parameters) == 0 || string(t.Parameters) == "null" {
			t.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		t.Parameters = compactJSON(t.Parameters)
		var schema map[string]any
		if err := json.Unmarshal(t.Parameters, &schema); err != nil {
			return fmt.Errorf("%s.parameters: want a JSON Schema object: %w", field, err)
		}
		if typ, ok := schema["type"]; ok && typ != "object" {
			return fmt.Errorf("%s.parameters: the args schema must have type \"object\", not %v", field, typ)
		}
		meta, err := objectOrNil(t.ApprovalMetadata)
		if err != nil {
			return fmt.Errorf("%s.approval_metadata: want an object: %w", field, err)
		}
		t.ApprovalMetadata = meta
		if t.Deadline < 0 || t.CallDeadline < 0 {
			return fmt.Errorf("%s.deadline: must not be negative", field)
		}
		rule, err := compileApproval(t.Approval)
		if err != nil {
			return fmt.Errorf("%s.approval: %w", field, err)
		}
		t.approval = rule
	}
	return nil
}

// tool returns the tool named name, or nil.
func (c *AgentConfig) tool(name string) *ToolConfig {
	for i := range c.Tools {
		if c.Tools[i].Name == name {
			return &c.Tools[i]
		}
	}
	return nil
}

// objectOrNil compacts a JSON object; absent or null is nil.
func objectOrNil(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	raw = compactJSON(raw)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return raw, nil
}

// compactJSON drops insignificant whitespace (YAML converts to spaced JSON);
// invalid JSON is returned as is for the caller's check to report.
func compactJSON(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}
