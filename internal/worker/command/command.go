// Package command is tool-worker's exec executor: it runs a command once
// per call, with the call as JSON on stdin.
package command

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/toolgate/toolgate/internal/worker/executor"
	"io/fs"
	"os/exec"
	"strings"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// ExitRetry is the exit status with which a command asks the model to try
// again (EX_TEMPFAIL); the message is its stdout, or the end of its stderr.
const ExitRetry = 75

// Command is the exec executor: it runs a program once per call.
//
// The program gets the CallRequest as JSON on stdin and, in its environment,
// TOOLGATE_RUN_ID, TOOLGATE_CONVERSATION_ID, TOOLGATE_TOOL_CALL_ID,
// TOOLGATE_TOOL_NAME and TOOLGATE_IDEMPOTENCY_KEY (run_id:tool_call_id, the
// same on every redelivery of the call). It inherits the worker's
// environment except the worker's own TOOLGATE_* variables. Its stdout
// is the result, read by executor.ParseResult. Exit status 0 returns that result;
// ExitRetry asks for a retry; any other status fails the call with the end of
// stderr. A call that outlives its deadline is killed (with its process
// group) and fails with "timed out".
type Command struct {
	// Argv is the program and its arguments; required.
	Argv []string
	// Dir is the working directory. Defaults to the worker's.
	Dir string
	// Env is added to the worker's environment. Defaults to nothing extra.
	Env []string
	// MaxOutput bounds stdout; a call that prints more fails. Defaults to 4 MiB.
	MaxOutput int
	// WaitDelay bounds the wait for the output pipes once the program was
	// killed or has exited. Defaults to 2s.
	WaitDelay time.Duration
}

// New splits command into words (see SplitWords) and returns a
// Command running them. A program that cannot be found or run (not on PATH,
// no such file, not executable) is refused here: otherwise every call would
// fail, showing the model the worker's paths.
func New(command string) (*Command, error) {
	argv, err := SplitWords(command)
	if err != nil {
		return nil, fmt.Errorf("command %q: %w", command, err)
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("command %q: empty", command)
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, fmt.Errorf("command %q: %w", command, err)
	}
	return &Command{Argv: argv}, nil
}

// Execute runs the program for req.
func (c *Command) Execute(ctx context.Context, req wire.CallRequest) (wire.CallReply, error) {
	if len(c.Argv) == 0 {
		return wire.CallReply{}, errors.New("exec: empty command")
	}
	if len(req.Args) == 0 {
		req.Args = json.RawMessage("{}")
	}
	stdin, err := json.Marshal(req)
	if err != nil {
		return executor.Failed("encode call request: %v", err), nil
	}
	maxOut := c.MaxOutput
	if maxOut <= 0 {
		maxOut = executor.DefaultMaxOutput
	}
	waitDelay := c.WaitDelay
	if waitDelay <= 0 {
		waitDelay = 2 * time.Second
	}

	ctx, cancel := executor.WithCallDeadline(ctx, req)
	defer cancel()

	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Dir = c.Dir
	cmd.Env = append(executor.ChildEnv(cmd.Environ()), c.Env...)
	cmd.Env = append(cmd.Env,
		"TOOLGATE_RUN_ID="+req.RunID,
		"TOOLGATE_CONVERSATION_ID="+req.ConversationID,
		"TOOLGATE_TOOL_CALL_ID="+req.ToolCallID,
		"TOOLGATE_TOOL_NAME="+req.ToolName,
		"TOOLGATE_IDEMPOTENCY_KEY="+executor.IdempotencyKey(req),
	)
	cmd.Stdin = bytes.NewReader(stdin)
	stdout := &executor.LimitedBuffer{Max: maxOut}
	stderr := &executor.Tail{Max: executor.StderrTail}
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.WaitDelay = waitDelay
	end := ownSession(cmd)
	runErr := cmd.Run()
	end()
	if ctx.Err() != nil {
		if executor.TimedOut(ctx) {
			return executor.Failed(executor.TimedOutMessage), nil
		}
		return wire.CallReply{}, fmt.Errorf("exec %s: %w", c.Argv[0], context.Cause(ctx))
	}
	var exitErr *exec.ExitError
	switch {
	case runErr == nil:
		// exit status 0
	case errors.As(runErr, &exitErr):
		code := exitErr.ExitCode()
		if code == ExitRetry {
			return executor.Retry("%s", retryMessage(stdout.Buf.Bytes(), stderr.String())), nil
		}
		if msg := stderr.String(); msg != "" {
			return executor.Failed("%s", msg), nil
		}
		return executor.Failed("%s", exitErr.Error()), nil
	case errors.Is(runErr, exec.ErrNotFound), errors.Is(runErr, fs.ErrNotExist), errors.Is(runErr, fs.ErrPermission):
		// A missing or forbidden program will not appear on redelivery.
		return executor.Failed("start %s: %v", c.Argv[0], runErr), nil
	case errors.Is(runErr, exec.ErrWaitDelay):
		// The program exited but something it started kept its output open;
		// what it printed is complete.
	default:
		return wire.CallReply{}, fmt.Errorf("exec %s: %w", c.Argv[0], runErr)
	}
	if stdout.Overflow {
		return executor.Failed("output exceeds %d bytes", maxOut), nil
	}
	return executor.ParseResult(stdout.Buf.Bytes()), nil
}

// retryMessage is what the model is told when a program exits with
// ExitRetry: the message of a model-retry form or JSON string on stdout, its
// plain text, or else the end of stderr.
func retryMessage(stdout []byte, stderr string) string {
	if len(bytes.TrimSpace(stdout)) > 0 {
		r := executor.ParseResult(stdout)
		switch {
		case r.Outcome != wire.OutcomeReturn:
			if r.Message != "" {
				return r.Message
			}
		default:
			var s string
			if err := json.Unmarshal(r.Value, &s); err == nil && s != "" {
				return s
			}
			return string(r.Value)
		}
	}
	if stderr != "" {
		return stderr
	}
	return fmt.Sprintf("retry requested (exit status %d)", ExitRetry)
}

// SplitWords splits a command line into words the way a POSIX shell would,
// without expanding anything: blanks separate words; single quotes keep
// everything up to the next single quote; double quotes keep everything but
// allow \" \\ \$ and \` escapes; a backslash outside quotes escapes the next
// character. Pipes, redirections and variables are not interpreted: write
// `sh -c '…'` for those.
func SplitWords(s string) ([]string, error) {
	var (
		words   []string
		cur     strings.Builder
		inWord  bool
		runes   = []rune(s)
		dquoted = false
	)
	for i := 0; i < len(runes); i++ {
		r := runes[i]
		switch {
		case dquoted:
			switch r {
			case '"':
				dquoted = false
			case '\\':
				if i+1 < len(runes) && strings.ContainsRune("\"\\$`\n", runes[i+1]) {
					i++
					if runes[i] != '\n' {
						cur.WriteRune(runes[i])
					}
				} else {
					cur.WriteRune(r)
				}
			default:
				cur.WriteRune(r)
			}
		case r == '\'':
			inWord = true
			end := -1
			for j := i + 1; j < len(runes); j++ {
				if runes[j] == '\'' {
					end = j
					break
				}
			}
			if end < 0 {
				return nil, errors.New("unterminated single quote")
			}
			cur.WriteString(string(runes[i+1 : end]))
			i = end
		case r == '"':
			inWord = true
			dquoted = true
		case r == '\\':
			inWord = true
			if i+1 >= len(runes) {
				return nil, errors.New("trailing backslash")
			}
			i++
			if runes[i] != '\n' {
				cur.WriteRune(runes[i])
			}
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			inWord = true
			cur.WriteRune(r)
		}
	}
	if dquoted {
		return nil, errors.New("unterminated double quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
