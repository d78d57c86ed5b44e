// Package cli is the command-line plumbing the toolgate binaries share: a
// flag set whose flags may follow positional arguments, one usage layout
// (usage, flags, environment) printed by --help with exit status 0,
// --version from the build information, the NATS connection flags, and the
// small helpers every main needs.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"unicode"
)

// ErrHelp is returned by Parse after it printed the usage or the version:
// the command is done and exits 0.
var ErrHelp = flag.ErrHelp

// UsageError is a command line that cannot be parsed; Main exits 2 on it.
type UsageError struct {
	Command string
	Err     error
}

func (e *UsageError) Error() string {
	return fmt.Sprintf("%v (see %s --help)", e.Err, e.Command)
}

func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError of command.
func Usagef(command, format string, args ...any) error {
	return &UsageError{Command: command, Err: fmt.Errorf(format, args...)}
}

// Env documents an environment variable in the usage text.
type Env struct{ Name, Doc string }

// Command describes a binary (or one of its subcommands) for its usage.
type Command struct {
	// Name is how the command is invoked, e.g. "approver keygen".
	Name string
	// Usage holds the synopsis lines, each without the leading "usage: ".
	Usage []string
	// About is free text printed after the synopsis.
	About string
	// Env lists the environment variables the command reads.
	Env []Env
}

// FlagSet is a flag.FlagSet with --version and the shared usage layout.
type FlagSet struct {
	*flag.FlagSet
	cmd     Command
	version bool
}

// NewFlagSet returns a flag set for cmd with --version registered.
func NewFlagSet(cmd Command) *FlagSet {
	f := &FlagSet{FlagSet: flag.NewFlagSet(cmd.Name, flag.ContinueOnError), cmd: cmd}
	f.SetOutput(io.Discard)
	f.BoolVar(&f.version, "version", false, "print the version and exit")
	return f
}

// Parse parses args, with flags allowed before, between and after the
// positional arguments (`run -follow PROMPT`, `approve ID --args JSON`);
// after "--" everything is positional. --help prints the usage to stdout
// and --version the version; both then return ErrHelp.
func (f *FlagSet) Parse(args []string, stdout io.Writer) ([]string, error) {
	var pos []string
	for rest := args; ; {
		if err := f.FlagSet.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				f.WriteUsage(stdout)
				return nil, ErrHelp
			}
			return nil, &UsageError{Command: f.cmd.Name, Err: err}
		}
		consumed := len(rest) - f.NArg()
		if f.NArg() == 0 || (consumed > 0 && rest[consumed-1] == "--") {
			pos = append(pos, f.Args()...)
			break
		}
		pos = append(pos, f.Arg(0))
		rest = f.Args()[1:]
	}
	if f.version {
		fmt.Fprintln(stdout, f.cmd.Name, Version())
		return nil, ErrHelp
	}
	return pos, nil
}

// ParseHead parses the flags before a subcommand and returns the
// subcommand's name and arguments ("" when there is none).
func (f *FlagSet) ParseHead(args []string, stdout io.Writer) (string, []string, error) {
	if err := f.FlagSet.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.WriteUsage(stdout)
			return "", nil, ErrHelp
		}
		return "", nil, &UsageError{Command: f.cmd.Name, Err: err}
	}
	if f.version {
		fmt.Fprintln(stdout, f.cmd.Name, Version())
		return "", nil, ErrHelp
	}
	if f.NArg() == 0 {
		return "", nil, nil
	}
	return f.Arg(0), f.Args()[1:], nil
}

// WriteUsage writes the usage text: synopsis, about, flags, environment.
func (f *FlagSet) WriteUsage(w io.Writer) {
	for i, u := range f.cmd.Usage {
		lead := "usage: "
		if i > 0 {
			lead = "       "
		}
		fmt.Fprintf(w, "%s%s\n", lead, u)
	}
	if f.cmd.About != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(f.cmd.About, "\n"))
	}
	fmt.Fprintln(w, "\nflags:")
	f.SetOutput(w)
	f.PrintDefaults()
	f.SetOutput(io.Discard)
	if len(f.cmd.Env) > 0 {
		fmt.Fprintln(w, "\nenvironment:")
		width := 0
		for _, e := range f.cmd.Env {
			width = max(width, len(e.Name))
		}
		for _, e := range f.cmd.Env {
			fmt.Fprintf(w, "  %-*s  %s\n", width, e.Name, e.Doc)
		}
	}
}

// Version is the module version of the running binary with its VCS
// revision, e.g. "v0.0.0-20261203065918-c8117bd2a1f0+dirty (go1.26.0)".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "(devel)"
		rev, modified := "", false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if rev != "" {
			v = rev[:min(12, len(rev))]
			if modified {
				v += "+dirty"
			}
		}
	}
	return fmt.Sprintf("%s (%s)", v, bi.GoVersion)
}

// Main runs a command's run function under a context that ends on SIGINT
// or SIGTERM, and exits: 0 on success or after --help and --version, 2 on
// a usage error, 1 on any other error, printed as "name: error".
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(ExitCode(name, err, os.Stderr))
}

// ExitCode prints err (if any) as "name: err" to stderr and returns the
// exit status Main uses.
func ExitCode(name string, err error, stderr io.Writer) int {
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 1
}

// EnvOr returns the environment variable key, or def when it is unset or
// empty.
func EnvOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// Pairs collects a repeatable NAME=VALUE flag.
type Pairs []string

func (p *Pairs) String() string     { return strings.Join(*p, ",") }
func (p *Pairs) Set(v string) error { *p = append(*p, v); return nil }

// Logger returns a text logger on w at level ("debug", "info", "warn" or
// "error"); the error names flagName.
func Logger(w io.Writer, level, flagName string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--%s: %w", flagName, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

// DefaultID is prefix-HOSTNAME[-suffix], with what a subject token cannot
// hold (the dots of a domain name, say) turned into dashes: the default id
// of a worker or an approver.
func DefaultID(prefix, suffix string) string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "local"
	}
	id := strings.Map(func(r rune) rune {
		switch {
		case r == '.' || r == '*' || r == '>' || r == '/' || r == '\\',
			unicode.IsSpace(r), unicode.IsControl(r):
			return '-'
		}
		return r
	}, h)
	if prefix != "" {
		id = prefix + "-" + id
	}
	if suffix != "" {
		id += "-" + suffix
	}
	return id
}

// ReadToken reads a token file ("" when no file is given); a file without
// a token is an error, never an open door.
func ReadToken(flagName, file string) (string, error) {
	if file == "" {
		return "", nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", flagName, err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("--%s: %s is empty", flagName, file)
	}
	return tok, nil
}
