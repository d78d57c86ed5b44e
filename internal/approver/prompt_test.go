package approver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/wire"
)

// syncBuffer lets a test read the prompt's output while Ask still writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func promptRequest() wire.ApprovalRequest {
	return wire.ApprovalRequest{
		RunID: "run-1", ToolCallID: "call-7", ToolName: "delete_file",
		ToolDescription: "Deletes a file.",
		Args:            json.RawMessage(`{"path":"/tmp/x","force":true}`),
		Metadata:        json.RawMessage(`{"reason":"irreversible"}`),
		Deadline:        time.Now().Add(time.Hour),
	}
}

func TestPromptAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		input     string
		want      approver.Verdict
		wantInOut []string
	}{
		{
			name:  "approve",
			input: "a\n",
			want:  approver.Verdict{Action: approver.ActionApprove, Rule: -1},
		},
		{
			name:  "deny with message, last line without newline",
			input: "d\nnot on a friday",
			want:  approver.Verdict{Action: approver.ActionDeny, Message: "not on a friday", Rule: -1},
		},
		{
			name:  "deny with empty message",
			input: "deny\n\n",
			want:  approver.Verdict{Action: approver.ActionDeny, Rule: -1},
		},
		{
			name:      "edit args: invalid JSON asks again",
			input:     "e\n{\"path\":\n[1,2]\n{ \"path\" : \"/tmp/y\" }\n",
			want:      approver.Verdict{Action: approver.ActionApprove, OverrideArgs: json.RawMessage(`{"path":"/tmp/y"}`), Rule: -1},
			wantInOut: []string{"invalid args", "not a JSON object", "approved with edited args"},
		},
		{
			name:  "edit then go back then skip",
			input: "e\n\ns\n",
			want:  approver.Verdict{Action: approver.ActionEscalate, Rule: -1},
		},
		{
			name:      "unknown answer asks again",
			input:     "x\nA\n",
			want:      approver.Verdict{Action: approver.ActionApprove, Rule: -1},
			wantInOut: []string{`unknown answer "x"`},
		},
		{
			name:  "skip",
			input: "s\n",
			want:  approver.Verdict{Action: approver.ActionEscalate, Rule: -1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out syncBuffer
			p := approver.NewPrompt(strings.NewReader(tt.input), &out)
			defer p.Close()
			got, err := p.Ask(t.Context(), promptRequest())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("verdict (-want +got):\n%s", diff)
			}
			o := out.String()
			for _, s := range append([]string{"delete_file", "Deletes a file.", "call-7", "deadline:", `  "path": "/tmp/x"`, `"reason": "irreversible"`}, tt.wantInOut...) {
				if !strings.Contains(o, s) {
					t.Errorf("output lacks %q:\n%s", s, o)
				}
			}
		})
	}
}

func TestPromptOneRequestAfterAnother(t *testing.T) {
	t.Parallel()
	var out syncBuffer
	p := approver.NewPrompt(strings.NewReader("a\nd\nno\n"), &out)
	defer p.Close()
	first, err := p.Ask(t.Context(), promptRequest())
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Ask(t.Context(), promptRequest())
	if err != nil {
		t.Fatal(err)
	}
	if first.Action != approver.ActionApprove || second.Action != approver.ActionDeny || second.Message != "no" {
		t.Errorf("answers = %+v, %+v", first, second)
	}
	if _, err := p.Ask(t.Context(), promptRequest()); !errors.Is(err, io.EOF) {
		t.Errorf("third Ask err = %v, want EOF", err)
	}
}

func TestPromptExpiredInputIsNotReused(t *testing.T) {
	t.Parallel()
	in, w := io.Pipe()
	var out syncBuffer
	p := approver.NewPrompt(in, &out)
	defer func() {
		p.Close()
		w.Close()
	}()

	req := promptRequest()
	req.Deadline = time.Now().Add(50 * time.Millisecond)
	if _, err := p.Ask(t.Context(), req); !errors.Is(err, approver.ErrExpired) {
		t.Fatalf("Ask err = %v, want ErrExpired", err)
	}
	// The answer typed for the expired request must not approve the next.
	done := make(chan struct{})
	var got approver.Verdict
	var askErr error
	go func() {
		defer close(done)
		got, askErr = p.Ask(t.Context(), promptRequest())
	}()
	if _, err := io.WriteString(w, "a\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "s\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Ask did not return")
	}
	if askErr != nil {
		t.Fatal(askErr)
	}
	if got.Action != approver.ActionEscalate {
		t.Errorf("verdict = %+v, want skip", got)
	}
	if !strings.Contains(out.String(), `ignored "a"`) {
		t.Errorf("output does not say the stale answer was ignored:\n%s", out.String())
	}
}

func TestPromptContextCancel(t *testing.T) {
	t.Parallel()
	in, w := io.Pipe()
	defer w.Close()
	p := approver.NewPrompt(in, io.Discard)
	defer p.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.Ask(ctx, promptRequest()); !errors.Is(err, context.Canceled) {
		t.Errorf("Ask err = %v, want canceled", err)
	}
}

// Tell writes what became of an answer on a line of its own.
func TestPromptTell(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	p := approver.NewPrompt(strings.NewReader(""), &out)
	defer p.Close()
	p.Tell("the orchestrator refused the decision on r1/c1 (refused): not signed")
	if want := "the orchestrator refused the decision on r1/c1 (refused): not signed\n"; out.String() != want {
		t.Errorf("Tell wrote %q, want %q", out.String(), want)
	}
}
