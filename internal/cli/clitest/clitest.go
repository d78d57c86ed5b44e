// Package clitest checks what every toolgate binary promises on its
// command line.
package clitest

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/cli"
)

// CheckHelp runs a main's run with --help and with --version: both must
// end with cli.ErrHelp (exit status 0) and print to stdout a usage with
// the shared headers naming every variable in env (which README.md must
// list too, from a test in cmd/NAME), and the version.
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
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range env {
		if !strings.Contains(string(readme), "`"+e+"`") {
			t.Errorf("README.md does not list %s", e)
		}
	}
	out.Reset()
	if err := run([]string{"--version"}, &out); !errors.Is(err, cli.ErrHelp) || !strings.HasPrefix(out.String(), name+" ") {
		t.Errorf("%s --version: %v, %q", name, err, out.String())
	}
}
