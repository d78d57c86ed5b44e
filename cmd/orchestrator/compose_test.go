package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// docker-compose.yml cannot be run here; what the first hour with it
// needs is held by reading it: three orchestrator replicas on the
// three-node NATS, each started with flags this binary takes (the stream
// replicas by their current name) and on a host port of its own; the
// documented curl sends the token, the orchestrators run the demo (which
// reads OPENAI_API_KEY, an --agent file does not), every process knows
// every NATS node, the worker replicas share one sandbox, and bin/ stays
// out of the build context.
func TestComposeFile(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	type service struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		Secrets     []string          `yaml:"secrets"`
		Deploy      struct {
			Replicas int `yaml:"replicas"`
		} `yaml:"deploy"`
	}
	var c struct {
		Services map[string]service `yaml:"services"`
		Volumes  map[string]any     `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `-H "Authorization: Bearer $(cat deploy/api_token.example)"`) {
		t.Error("the curl in the header sends no token")
	}
	var natsNodes []string
	for name, s := range c.Services {
		if strings.HasPrefix(s.Image, "nats:") {
			natsNodes = append(natsNodes, "nats://"+name+":4222")
		}
	}
	if len(natsNodes) != 3 {
		t.Errorf("%d NATS nodes %v, want 3", len(natsNodes), natsNodes)
	}
	// natsFlag is the --nats a command gives, and whether it names every node.
	natsFlag := func(cmd []string) (string, bool) {
		for _, a := range cmd {
			if list, ok := strings.CutPrefix(a, "--nats="); ok {
				urls := strings.Split(list, ",")
				slices.Sort(urls)
				nodes := slices.Sorted(slices.Values(natsNodes))
				return list, slices.Equal(urls, nodes)
			}
		}
		return "", false
	}

	hostPorts := map[string]string{}
	orchestrators := 0
	for name, o := range c.Services {
		if len(o.Command) == 0 || o.Command[0] != "orchestrator" {
			continue
		}
		orchestrators += max(o.Deploy.Replicas, 1)
		cmd := strings.Join(o.Command, " ")
		opts, err := parseFlags(o.Command[1:], io.Discard)
		if err != nil {
			t.Errorf("%s: orchestrator refuses its flags: %v", name, err)
			continue
		}
		if len(opts.warnings) != 0 {
			t.Errorf("%s: %q", name, opts.warnings)
		}
		if opts.streamReplicas != len(natsNodes) {
			t.Errorf("%s: --stream-replicas %d on %d NATS nodes", name, opts.streamReplicas, len(natsNodes))
		}
		if list, all := natsFlag(o.Command); !all {
			t.Errorf("%s: --nats=%s, want every node %v", name, list, natsNodes)
		}
		if strings.Contains(cmd, "--agent") {
			t.Errorf("%s runs an --agent file, which ignores OPENAI_API_KEY", name)
		}
		if !strings.Contains(cmd, "--allow-unsigned") && !strings.Contains(cmd, "--trust-approver") {
			t.Errorf("%s listens beyond loopback with neither --trust-approver nor --allow-unsigned: it refuses to start", name)
		}
		if opts.tokenFile == "" || !slices.Contains(o.Secrets, "api_token") {
			t.Errorf("%s: its API takes no token (--http-token-file %q, secrets %v)", name, opts.tokenFile, o.Secrets)
		}
		if _, ok := o.Environment["OPENAI_API_KEY"]; !ok {
			t.Errorf("OPENAI_API_KEY is not passed to %s", name)
		}
		_, httpPort, _ := strings.Cut(opts.httpAddr, ":")
		if len(o.Ports) != 1 {
			t.Errorf("%s: ports %v, want one", name, o.Ports)
		}
		for _, p := range o.Ports {
			host, container, _ := strings.Cut(p, ":")
			if container != httpPort {
				t.Errorf("%s publishes %s, not its --http port %s", name, p, httpPort)
			}
			if other, taken := hostPorts[host]; taken {
				t.Errorf("%s and %s both publish host port %s", name, other, host)
			}
			hostPorts[host] = name
		}
	}
	if orchestrators != 3 {
		t.Errorf("%d orchestrator replicas, want 3", orchestrators)
	}
	for _, name := range []string{"tool-worker", "approver"} {
		if list, all := natsFlag(c.Services[name].Command); !all {
			t.Errorf("%s: --nats=%s, want every node %v", name, list, natsNodes)
		}
	}
	w := c.Services["tool-worker"]
	if w.Deploy.Replicas > 1 {
		shared := false
		for _, v := range w.Volumes {
			name, target, _ := strings.Cut(v, ":")
			_, named := c.Volumes[name]
			shared = shared || named && strings.HasPrefix(target, "/var/lib/toolgate/sandbox")
		}
		if !shared {
			t.Errorf("%d worker replicas without one named sandbox volume: %q", w.Deploy.Replicas, w.Volumes)
		}
	}
	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil || !strings.Contains(string(ignore), "bin/") {
		t.Errorf(".dockerignore does not keep bin/ out: %v", err)
	}
}

// The files README.md and docs/ name in examples/ exist (the README once
// named seed-approval.script.yaml for seed-approval-script.yaml).
func TestDocsNameExistingExamples(t *testing.T) {
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, page := range append([]string{"../../README.md"}, pages...) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		names := regexp.MustCompile(`examples/([\w./-]+\.ya?ml)|script: ([\w.-]+\.ya?ml)`).FindAllStringSubmatch(string(text), -1)
		found += len(names)
		for _, m := range names {
			name := m[1] + m[2]
			if _, err := os.Stat(filepath.Join("../../examples", name)); err != nil {
				t.Errorf("%s names examples/%s: %v", page, name, err)
			}
		}
	}
	if found == 0 {
		t.Fatal("the docs name no example file")
	}
}
