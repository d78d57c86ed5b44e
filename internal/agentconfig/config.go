// Package agentconfig reads agent configs: YAML or JSON files decoded
// strictly (a field that is unknown or of the wrong type is refused with
// its path and line), checked, their approval rules compiled (package rule)
// and the model provider they name chosen (agent/openai or an offline
// model). The engine (package orchestrator) takes the result as it is and
// imports no model provider.
package agentconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/orchestrator"
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

// Load reads an agent config from a YAML or JSON file, loads its script
// file and compiles its approval rules.
func Load(path string) (*orchestrator.AgentConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	cfg, err := Parse(data, osDir(filepath.Dir(path)))
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

// Parse parses and checks an agent config (YAML; JSON is YAML too). A
// script file is read from dir (the config file's directory); dir may be
// nil when the config names no script. An error names the field's path and
// its line.
func Parse(data []byte, dir fs.FS) (*orchestrator.AgentConfig, error) {
	return parse(data, dir, true)
}

// ParseWithGoTools is Parse for a program that gives the agent tools in
// Go (orchestrator.Config.Tools): the config itself may then name none.
func ParseWithGoTools(data []byte, dir fs.FS) (*orchestrator.AgentConfig, error) {
	return parse(data, dir, false)
}

func parse(data []byte, dir fs.FS, needTools bool) (*orchestrator.AgentConfig, error) {
	var cfg orchestrator.AgentConfig
	doc, err := decode(data, &cfg)
	if err != nil {
		return nil, err
	}
	if err := readScript(&cfg, dir); err != nil {
		return nil, doc.locate(err)
	}
	if err := validate(&cfg, needTools); err != nil {
		return nil, doc.locate(err)
	}
	c := &cfg
	c.ModelFunc = func(lookupEnv func(string) (string, bool), logger *slog.Logger) (agent.Model, error) {
		return NewModel(c, lookupEnv, logger)
	}
	return c, nil
}

// readScript reads the responses of a script model.
func readScript(cfg *orchestrator.AgentConfig, dir fs.FS) error {
	if cfg.Model.Script == "" || cfg.Model.Provider != ProviderScript {
		return nil
	}
	if dir == nil {
		return fieldErrorf("model.script", "model.script: no directory to read %q from", cfg.Model.Script)
	}
	b, err := fs.ReadFile(dir, filepath.ToSlash(filepath.Clean(cfg.Model.Script)))
	if err != nil {
		return fieldErrorf("model.script", "model.script: %w", err)
	}
	script, err := agent.ParseScript(b)
	if err == nil && len(script) == 0 {
		err = errors.New("no responses")
	}
	if err != nil {
		return fieldErrorf("model.script", "model.script %s: %w", cfg.Model.Script, err)
	}
	cfg.Script = script
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

// LoadAll reads the agent configs paths name: each a file, or a
// directory whose *.yaml, *.yml and *.json files are each one agent (in
// name order; other files and subdirectories are ignored). An agent is
// named by its config's name:, else by its file's base name without the
// extension; two of one name are refused, naming both files. Files names
// each config's file, in the order of the configs.
func LoadAll(paths []string) (cfgs []*orchestrator.AgentConfig, files []string, err error) {
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, nil, fmt.Errorf("agent config: %w", err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, nil, fmt.Errorf("agent config: %w", err)
		}
		n := len(files)
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".json":
				if !e.IsDir() {
					files = append(files, filepath.Join(p, e.Name()))
				}
			}
		}
		if len(files) == n {
			return nil, nil, fmt.Errorf("agent config: directory %s holds no *.yaml, *.yml or *.json file", p)
		}
	}
	byName := map[string]string{}
	for _, f := range files {
		cfg, err := Load(f)
		if err != nil {
			return nil, nil, err
		}
		if cfg.Name == "" {
			base := filepath.Base(f)
			cfg.Name = strings.TrimSuffix(base, filepath.Ext(base))
		}
		if !orchestrator.ValidAgentName(cfg.Name) {
			return nil, nil, fmt.Errorf("agent config %s: name %q: letters, digits, _ and -, at most 64 (set name: in the file)", f, cfg.Name)
		}
		if other, ok := byName[cfg.Name]; ok {
			return nil, nil, fmt.Errorf("agent config: %s and %s both name an agent %q: names must be unique", other, f, cfg.Name)
		}
		byName[cfg.Name] = f
		cfgs = append(cfgs, cfg)
	}
	return cfgs, files, nil
}
