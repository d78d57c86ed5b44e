// Package clitest checks what every toolgate binary promises on its
// command line.
package clitest

import (
	"bytes"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/cli"
)

// CheckHelp runs a main's run with --help and with --version: both must
// end with cli.ErrHelp (exit status 0) and print to stdout a usage with
// the shared headers naming every variable in env, and the version.
// docs/cli.md, the command-line reference, must name every variable in env
// and every flag the usage lists, so that nothing a binary takes is known
// only to its --help.
// flagLine matches a flag in the usage flag.PrintDefaults writes.
var flagLine = regexp.MustCompile(`(?m)^  -([a-z][a-z0-9-]*)`)

func CheckHelp(t *testing.T, name string, run func(args []string, stdout *bytes.Buffer) error, env ...string) {
	t.Helper()
	var out bytes.Buffer
	if err := run([]string{"--help"}, &out); !errors.Is(err, cli.ErrHelp) {
		t.Errorf("%s --help: %v, want exit 0", name, err)
	}
	wants := append([]string{"usage: " + name, "\nflags:\n", "\nenvironment:\n"}, env...)
	for _, w := range wants {
		if !strings.Contains(out.String(), w) {
			t.Errorf("%s --help lacks %q:\n%s", name, w, out.String())
		}
	}
	raw, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, e := range env {
		if !strings.Contains(doc, "`"+e+"`") {
			t.Errorf("docs/cli.md does not list %s", e)
		}
	}
	for _, m := range flagLine.FindAllStringSubmatch(out.String(), -1) {
		if !strings.Contains(doc, "`--"+m[1]+"`") && !strings.Contains(doc, "`--"+m[1]+" ") {
			t.Errorf("docs/cli.md does not document %s --%s", name, m[1])
		}
	}
	out.Reset()
	if err := run([]string{"--version"}, &out); !errors.Is(err, cli.ErrHelp) || !strings.HasPrefix(out.String(), name+" ") {
		t.Errorf("%s --version: %v, %q", name, err, out.String())
	}
}
