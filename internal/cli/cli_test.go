package cli_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/cli"
	"github.com/toolgate/toolgate/wire"
)

func newFlags() (*cli.FlagSet, *bool, *string) {
	fs := cli.NewFlagSet(cli.Command{
		Name: "tg", Usage: []string{"tg [flags] ARG...", "tg other"}, About: "About text.",
		Env: []cli.Env{{Name: "TG_ADDR", Doc: "default of --addr"}},
	})
	return fs, fs.Bool("follow", false, "follow"), fs.String("addr", "x", "address")
}

func TestParseTakesFlagsAfterArguments(t *testing.T) {
	for _, tt := range []struct {
		args   []string
		pos    []string
		follow bool
		addr   string
	}{
		{[]string{"-follow", "hello world"}, []string{"hello world"}, true, "x"},
		{[]string{"hello", "--follow", "world", "--addr", "a"}, []string{"hello", "world"}, true, "a"},
		{[]string{"--addr=b", "p", "--", "--follow", "-x"}, []string{"p", "--follow", "-x"}, false, "b"},
		{[]string{}, nil, false, "x"},
	} {
		fs, follow, addr := newFlags()
		pos, err := fs.Parse(tt.args, new(bytes.Buffer))
		if err != nil || !slices.Equal(pos, tt.pos) || *follow != tt.follow || *addr != tt.addr {
			t.Errorf("Parse(%q) = %q, %v (follow %v, addr %q), want %q (follow %v, addr %q)", tt.args, pos, err, *follow, *addr, tt.pos, tt.follow, tt.addr)
		}
	}
}

func TestHelpAndVersionExitZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"arg", "-h"}, {"--version"}} {
		fs, _, _ := newFlags()
		var out bytes.Buffer
		_, err := fs.Parse(args, &out)
		if !errors.Is(err, cli.ErrHelp) {
			t.Fatalf("Parse(%q) = %v, want ErrHelp", args, err)
		}
		if code := cli.ExitCode("tg", err, new(bytes.Buffer)); code != 0 {
			t.Errorf("exit code after %q = %d, want 0", args, code)
		}
		if args[0] == "--version" {
			if !strings.HasPrefix(out.String(), "tg ") || !strings.Contains(out.String(), "(go") {
				t.Errorf("version = %q", out.String())
			}
			continue
		}
		for _, want := range []string{"usage: tg [flags] ARG...\n       tg other\n", "\nAbout text.\n", "\nflags:\n", "-follow", "\nenvironment:\n  TG_ADDR  default of --addr\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("usage lacks %q:\n%s", want, out.String())
			}
		}
	}
}

func TestBadFlagIsAUsageError(t *testing.T) {
	fs, _, _ := newFlags()
	_, err := fs.Parse([]string{"--nope"}, new(bytes.Buffer))
	var stderr bytes.Buffer
	if code := cli.ExitCode("tg", err, &stderr); code != 2 {
		t.Errorf("exit code = %d, want 2", code)
	}
	if got := stderr.String(); got != "tg: flag provided but not defined: -nope (see tg --help)\n" {
		t.Errorf("stderr = %q", got)
	}
	if code := cli.ExitCode("tg", errors.New("boom"), new(bytes.Buffer)); code != 1 {
		t.Errorf("exit code of an error = %d, want 1", code)
	}
}

func TestParseHeadStopsAtTheCommand(t *testing.T) {
	fs, follow, _ := newFlags()
	name, rest, err := fs.ParseHead([]string{"--follow", "run", "--addr", "y", "p"}, new(bytes.Buffer))
	if err != nil || name != "run" || !slices.Equal(rest, []string{"--addr", "y", "p"}) || !*follow {
		t.Errorf("ParseHead = %q %q %v (follow %v)", name, rest, err, *follow)
	}
}

func TestDefaultIDIsASubjectToken(t *testing.T) {
	for _, id := range []string{cli.DefaultID("approver", ""), cli.DefaultID("", "42")} {
		if err := wire.ValidateToken("id", id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
}

func TestNATSCheckRefusesAMalformedURL(t *testing.T) {
	n := &cli.NATS{URL: "http://127.0.0.1:4222"}
	if err := n.Check(); err == nil || !strings.Contains(err.Error(), "scheme") {
		t.Errorf("Check = %v", err)
	}
}
