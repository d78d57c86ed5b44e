package approver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// ErrExpired is returned by Prompt.Ask when the request's deadline passes
// before the human answers; nothing is decided.
var ErrExpired = errors.New("request expired before it was answered")

// Prompt asks a human at a terminal about one request at a time. Answers:
// a approve, d deny (then a message), e edit the args (then a JSON object;
// the call is approved with them), s skip (no decision).
type Prompt struct {
	out io.Writer
	in  *bufio.Reader
	now func() time.Time

	mu    sync.Mutex // one request at a time
	start sync.Once
	want  chan struct{}
	lines chan lineResult
	done  chan struct{}
	close sync.Once

	// pending: a read was requested and its line not yet taken. stale: the
	// Ask that requested it gave up, so that line was typed for a prompt
	// no longer on screen and must not answer the next one.
	pending, stale bool
	inErr          error // sticky: the input has ended
}

type lineResult struct {
	line string
	err  error
}

// NewPrompt reads answers from in and writes prompts to out.
func NewPrompt(in io.Reader, out io.Writer) *Prompt {
	return &Prompt{
		out:   out,
		in:    bufio.NewReader(in),
		now:   time.Now,
		want:  make(chan struct{}),
		lines: make(chan lineResult),
		done:  make(chan struct{}),
	}
}

// Close stops the prompt's input reader. A read already blocked on the
// input ends only when that read returns (for a terminal: at the next line
// or when the process exits).
func (p *Prompt) Close() error {
	p.close.Do(func() { close(p.done) })
	return nil
}

// readLoop reads one line per request so that nothing is read ahead of a
// prompt: input typed while no prompt is shown stays in the terminal.
func (p *Prompt) readLoop() {
	for {
		select {
		case <-p.want:
		case <-p.done:
			return
		}
		line, err := p.in.ReadString('\n')
		if err != nil && line != "" {
			err = nil // a last line without a newline is still an answer
		}
		select {
		case p.lines <- lineResult{line: strings.TrimRight(line, "\r\n"), err: err}:
		case <-p.done:
			return
		}
		if err != nil {
			return
		}
	}
}

func (p *Prompt) readLine(ctx context.Context) (string, error) {
	p.start.Do(func() { go p.readLoop() })
	for {
		if p.inErr != nil {
			return "", p.inErr
		}
		if !p.pending {
			select {
			case p.want <- struct{}{}:
				p.pending = true
			case <-p.done:
				return "", errors.New("prompt closed")
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		select {
		case r := <-p.lines:
			p.pending = false
			if r.err != nil {
				p.inErr = fmt.Errorf("prompt input: %w", r.err)
				continue
			}
			if p.stale {
				p.stale = false
				fmt.Fprintf(p.out, "(ignored %q: it was typed for an earlier request)\n> ", r.line)
				continue
			}
			return strings.TrimSpace(r.line), nil
		case <-p.done:
			return "", errors.New("prompt closed")
		case <-ctx.Done():
			p.stale = true
			return "", ctx.Err()
		}
	}
}

// Ask shows req and waits for an answer until req's deadline. Skip is a
// verdict with ActionEscalate. An expired request returns ErrExpired; input
// that ends returns an error wrapping io.EOF.
func (p *Prompt) Ask(ctx context.Context, req wire.ApprovalRequest) (Verdict, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	askCtx := ctx
	if !req.Deadline.IsZero() {
		var cancel context.CancelFunc
		askCtx, cancel = context.WithDeadline(ctx, req.Deadline)
		defer cancel()
	}
	v, err := p.ask(askCtx, req)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(p.out, "\nrequest %s expired; not answered\n", req.ToolCallID)
		return Verdict{Action: ActionEscalate, Rule: -1}, ErrExpired
	}
	return v, err
}

func (p *Prompt) ask(ctx context.Context, req wire.ApprovalRequest) (Verdict, error) {
	p.show(req)
	for {
		fmt.Fprint(p.out, "[a]pprove [d]eny [e]dit args [s]kip > ")
		line, err := p.readLine(ctx)
		if err != nil {
			return Verdict{}, err
		}
		switch strings.ToLower(line) {
		case "a", "approve":
			fmt.Fprintln(p.out, "approved")
			return Verdict{Action: ActionApprove, Rule: -1}, nil
		case "d", "deny":
			fmt.Fprint(p.out, "message for the model (empty for the default) > ")
			msg, err := p.readLine(ctx)
			if err != nil {
				return Verdict{}, err
			}
			fmt.Fprintln(p.out, "denied")
			return Verdict{Action: ActionDeny, Message: msg, Rule: -1}, nil
		case "e", "edit":
			args, ok, err := p.editArgs(ctx)
			if err != nil {
				return Verdict{}, err
			}
			if !ok {
				continue
			}
			fmt.Fprintln(p.out, "approved with edited args")
			return Verdict{Action: ActionApprove, OverrideArgs: args, Rule: -1}, nil
		case "s", "skip":
			fmt.Fprintln(p.out, "skipped")
			return Verdict{Action: ActionEscalate, Rule: -1}, nil
		default:
			fmt.Fprintf(p.out, "unknown answer %q\n", line)
		}
	}
}

// editArgs reads a JSON object on one line; ok is false when the human
// leaves the line empty to go back to the menu.
func (p *Prompt) editArgs(ctx context.Context) (json.RawMessage, bool, error) {
	for {
		fmt.Fprint(p.out, "new args as one line of JSON (empty to go back) > ")
		line, err := p.readLine(ctx)
		if err != nil {
			return nil, false, err
		}
		if line == "" {
			return nil, false, nil
		}
		var v any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			fmt.Fprintf(p.out, "invalid args: %v\n", err)
			continue
		}
		if _, ok := v.(map[string]any); !ok {
			fmt.Fprintln(p.out, "invalid args: not a JSON object")
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(line)); err != nil {
			fmt.Fprintf(p.out, "invalid args: %v\n", err)
			continue
		}
		return buf.Bytes(), true, nil
	}
}

func (p *Prompt) show(req wire.ApprovalRequest) {
	w := p.out
	fmt.Fprintf(w, "\n=== approval request ===\n")
	fmt.Fprintf(w, "tool:     %s\n", req.ToolName)
	if req.ToolDescription != "" {
		fmt.Fprintf(w, "          %s\n", req.ToolDescription)
	}
	fmt.Fprintf(w, "call:     %s (run %s)\n", req.ToolCallID, req.RunID)
	if req.Deadline.IsZero() {
		fmt.Fprintf(w, "deadline: none\n")
	} else {
		left := req.Deadline.Sub(p.now()).Round(time.Second)
		fmt.Fprintf(w, "deadline: %s (in %s)\n", req.Deadline.Local().Format(time.RFC3339), left)
	}
	fmt.Fprintf(w, "args:\n%s\n", indentJSON(req.Args))
	if m := bytes.TrimSpace(req.Metadata); len(m) != 0 && !bytes.Equal(m, []byte("null")) && !bytes.Equal(m, []byte("{}")) {
		fmt.Fprintf(w, "metadata:\n%s\n", indentJSON(req.Metadata))
	}
}

func indentJSON(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "  ", "  "); err != nil {
		return "  " + string(raw)
	}
	return "  " + buf.String()
}

// Tell writes what became of an answer given at the prompt (its decision
// refused, its request settled meanwhile) for the person who gave it.
func (p *Prompt) Tell(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(p.out, msg)
}
