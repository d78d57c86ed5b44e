// Package chat holds what the chat adapters (agui, aisdk) share: the
// engine they drive, their configuration, the conversation a client's
// thread or chat maps to, and the following of that conversation's events
// until it waits for the user or ends. Each adapter's wire protocol stays
// in its own package.
package chat

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"iter"
	"log/slog"
	"time"

	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// Engine is what an adapter needs of the orchestrator.
type Engine interface {
	StartRunWith(ctx context.Context, req orchestrator.StartRequest) (orchestrator.RunInfo, error)
	Conversation(ctx context.Context, id string) (*conversation.State, error)
	Answer(ctx context.Context, a orchestrator.Answer) error
	Events(ctx context.Context, id string, afterSeq uint64) iter.Seq2[orchestrator.StoredEvent, error]
	LastEventSeq(ctx context.Context) (uint64, error)
	Agents() []string
}

// Config configures an adapter.
type Config struct {
	// Logger receives what went wrong. nil discards it.
	Logger *slog.Logger
	// Clock is the time; nil is time.Now.
	Clock func() time.Time
	// KeepAlive is how often a response that waits (for workers, a
	// model) sends an SSE comment, so that proxies keep it open.
	// Defaults to 15s.
	KeepAlive time.Duration
}

// WithDefaults is cfg with its unset fields given their defaults.
func (cfg Config) WithDefaults() Config {
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return cfg
}

// ConversationID is the conversation of a client's thread or chat id (any
// string the client chose) in the adapter's namespace: in the form of the
// ids toolgate gives ("c" and hex), which its run ids embed. Namespaces
// keep two protocols' equal ids apart.
func ConversationID(namespace, id string) string {
	sum := sha256.Sum256([]byte(namespace + "\x00" + id))
	return "c" + hex.EncodeToString(sum[:12])
}

// Prompts are c's user prompts in order: its runs', then the batch's
// prompt that no run has taken up yet.
func Prompts(c *conversation.State) []string {
	var prompts []string
	for _, r := range c.Runs {
		if r.Prompt != "" {
			prompts = append(prompts, r.Prompt)
		}
	}
	if b := c.Batch; b != nil && b.Prompt != "" && !hasRun(c, b.PromptRunID) {
		prompts = append(prompts, b.Prompt)
	}
	return prompts
}

func hasRun(c *conversation.State, runID string) bool {
	for _, r := range c.Runs {
		if r.RunID == runID {
			return true
		}
	}
	return false
}

// Follow yields the events of conversation id stored after sequence after
// of its runs other than oldRuns (the runs before this request), and its
// cancellation when it came after start (cancelled true), until ctx ends or
// the caller stops. An error reading the events is skipped while ctx lives.
func Follow(ctx context.Context, e Engine, id string, after uint64, start time.Time, oldRuns map[string]bool) iter.Seq2[orchestrator.StoredEvent, bool] {
	return func(yield func(orchestrator.StoredEvent, bool) bool) {
		for se, err := range e.Events(ctx, id, after) {
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
			ev := se.Event
			if ev.Type == wire.EventConversationCancelled && se.Time.After(start) {
				yield(se, true)
				return
			}
			if ev.RunID == "" || oldRuns[ev.RunID] {
				continue
			}
			if !yield(se, false) {
				return
			}
		}
	}
}

// Settles reports whether c's state ends the response here, and is false
// when the conversation is left to its events. Before any new run (paused
// "") a conversation that will run again (a prompt given, a batch
// completed) is left to its events; after run paused, only that run's own
// pause settles. A paused conversation settles only when the adapter finds
// it waits for the user.
func Settles(c *conversation.State, oldRuns map[string]bool, prompt, paused string) bool {
	ran := paused != ""
	if ran && (len(c.Runs) == 0 || c.Runs[len(c.Runs)-1].RunID != paused || c.Status != conversation.StatusPaused) {
		return false
	}
	if !ran {
		for _, r := range c.Runs {
			if !oldRuns[r.RunID] {
				return false // a run started by this request
			}
		}
	}
	switch c.Status {
	case conversation.StatusCompleted, conversation.StatusFailed:
		return ran || prompt == ""
	}
	return true
}

// NewPrompt checks a history's user messages (users) against the
// conversation's prompts: the past ones all there and unchanged, at most
// one new one after them. It reports whether there is a new one, which is
// users[len(prompts)].
func NewPrompt(users, prompts []string) (bool, error) {
	n := len(prompts)
	switch {
	case len(users) < n:
		return false, fmt.Errorf("the history holds %d user messages where the conversation has %d: a past message is missing", len(users), n)
	case len(users) > n+1:
		return false, fmt.Errorf("the history holds %d user messages where the conversation has %d: only one new message is read", len(users), n)
	}
	for i, p := range prompts {
		if users[i] != p {
			return false, fmt.Errorf("user message %d is not the conversation's: a past message was edited", i+1)
		}
	}
	return len(users) == n+1, nil
}

// Refusal is a request an adapter refuses: its protocol's error, nothing
// applied. Forged is the answer that made it, when the orchestrator can
// refuse and record it on its own (a call not pending, args other than the
// call's): it is handed over, so that the attempt is in the call's counters
// and the audit as a forged bot decision would be.
type Refusal struct {
	Code, Msg string
	Forged    *orchestrator.Answer
}

func (r *Refusal) Error() string { return r.Msg }

// Refuse is the refusal of code with the message format makes of args.
func Refuse(code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Msg: fmt.Sprintf(format, args...)}
}
