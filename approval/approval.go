package approval

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/approver"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// Request is an approval request: the tool, its args, their digest, the
// reason (metadata), the tool's schema, the run and its deadline.
type Request = wire.ApprovalRequest

// Verdict is a Decider's answer; make one with Approve, ApproveWithArgs,
// Deny or Escalate.
type Verdict struct {
	v   approver.Verdict
	err error
}

// Approve lets the call run with the model's args.
func Approve() Verdict { return Verdict{v: approver.Verdict{Action: approver.ActionApprove, Rule: -1}} }

// ApproveWithArgs lets the call run with args (marshalled to a JSON
// object) instead of the model's.
func ApproveWithArgs(args any) Verdict {
	raw, err := json.Marshal(args)
	if err != nil {
		return Verdict{err: fmt.Errorf("approve with args: %w", err)}
	}
	v := Approve()
	v.v.OverrideArgs = raw
	return v
}

// WithMetadata gives an approval metadata (marshalled to a JSON object)
// that reaches the approved call's tool: the worker's call request, an
// in-process tool's RunContext.ToolCallMetadata. It is signed with the
// decision. On any other verdict it is an error.
func (v Verdict) WithMetadata(metadata any) Verdict {
	if v.err != nil {
		return v
	}
	if v.v.Action != approver.ActionApprove {
		return Verdict{err: errors.New("metadata: only an approval gives its tool metadata")}
	}
	raw, err := json.Marshal(metadata)
	if err != nil {
		return Verdict{err: fmt.Errorf("metadata: %w", err)}
	}
	if len(raw) == 0 || raw[0] != '{' {
		return Verdict{err: errors.New("metadata: want a JSON object")}
	}
	v.v.Metadata = raw
	return v
}

// Deny refuses the call; the model is told message.
func Deny(message string) Verdict {
	if message == "" {
		message = approver.PolicyDenyMessage
	}
	return Verdict{v: approver.Verdict{Action: approver.ActionDeny, Message: message, Rule: -1}}
}

// Escalate gives no decision: the request stays pending for other
// approvers (a human in the inbox, another bot).
func Escalate() Verdict {
	return Verdict{v: approver.Verdict{Action: approver.ActionEscalate, Rule: -1}}
}

// Decider decides approval requests. An error hands the request back: it
// is delivered again later.
type Decider interface {
	Decide(ctx context.Context, req Request) (Verdict, error)
}

// DeciderFunc adapts a function to Decider.
type DeciderFunc func(ctx context.Context, req Request) (Verdict, error)

// Decide calls f(ctx, req).
func (f DeciderFunc) Decide(ctx context.Context, req Request) (Verdict, error) { return f(ctx, req) }

// Config configures a Bot.
type Config struct {
	// ID names the bot: its durable consumer and the approver_id of its
	// decisions. Required; letters, digits, '-' and '_'.
	ID string
	// Key signs the decisions. nil sends them unsigned, which an
	// orchestrator that trusts keys refuses.
	Key ed25519.PrivateKey
	// Tool, when set, narrows the bot to that tool's requests.
	Tool string
	// Logger receives the bot's log. nil discards it.
	Logger *slog.Logger
	// Handled, if set, is called after each request is handled with what
	// became of it: approved, denied, escalated, expired, duplicate,
	// settled (no longer pending, so not decided: the orchestrator said so)
	// or refused (the orchestrator did not apply the decision; Refused
	// says why).
	Handled func(req Request, outcome string)
	// Refused, if set, is told why the orchestrator refused a decision:
	// verdict is refused, late, duplicate or unknown_run (see
	// wire.DecisionOutcome), reason in words.
	Refused func(req Request, verdict, reason string)
}

// Bot decides approval requests with a Decider. Run it once.
type Bot struct {
	nc  *nats.Conn
	cfg Config
	d   Decider
}

// New returns a bot on nc that decides with d. It does not close nc. On a
// server with toolgate's users, connect as a user of role approver with
// that role's inbox prefix, nats.CustomInboxPrefix("_INBOX_approver").
func New(nc *nats.Conn, cfg Config, d Decider) (*Bot, error) {
	if nc == nil {
		return nil, errors.New("approval: connection is nil")
	}
	if d == nil {
		return nil, errors.New("approval: decider is nil")
	}
	if err := wire.ValidateToken("approver id", cfg.ID); err != nil {
		return nil, fmt.Errorf("approval: %w", err)
	}
	if cfg.Key != nil && len(cfg.Key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("approval: key is %d bytes, want %d", len(cfg.Key), ed25519.PrivateKeySize)
	}
	if cfg.Tool != "" {
		if err := wire.ValidateToken("tool name", cfg.Tool); err != nil {
			return nil, fmt.Errorf("approval: %w", err)
		}
	}
	return &Bot{nc: nc, cfg: cfg, d: d}, nil
}

// Run decides requests until ctx ends and returns nil once the request in
// hand is finished.
func (b *Bot) Run(ctx context.Context) error {
	logger := b.cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := bus.FromConn(b.nc, bus.ConnConfig{Name: "toolgate-approval-" + b.cfg.ID, Logger: logger})
	if err != nil {
		return fmt.Errorf("approval: %w", err)
	}
	defer conn.Close()
	cfg := approver.Config{Bus: conn, ID: b.cfg.ID, Key: b.cfg.Key, Logger: logger, Decider: decider{b.d}}
	if b.cfg.Tool != "" {
		cfg.Filter, _ = wire.ApprovalSubject(b.cfg.Tool)
	}
	if h := b.cfg.Handled; h != nil {
		cfg.HandledFunc = func(req wire.ApprovalRequest, o approver.Outcome) { h(req, string(o)) }
	}
	if r := b.cfg.Refused; r != nil {
		cfg.RefusedFunc = func(req wire.ApprovalRequest, err *approver.RefusedError) { r(req, err.Verdict, err.Reason) }
	}
	a, err := approver.New(cfg)
	if err != nil {
		return fmt.Errorf("approval: %w", err)
	}
	return a.Run(ctx)
}

// decider adapts a Decider to the engine's.
type decider struct{ d Decider }

func (d decider) Decide(ctx context.Context, req wire.ApprovalRequest) (approver.Verdict, error) {
	v, err := d.d.Decide(ctx, req)
	if err == nil {
		err = v.err
	}
	if err != nil {
		return approver.Verdict{}, err
	}
	if v.v.Action == "" {
		// The zero Verdict decides nothing.
		return Escalate().v, nil
	}
	return v.v, nil
}

// Policy is a Decider of CEL rules, the approver binary's policy file
// (see the README's approval policy): the first rule that matches decides,
// no match escalates.
type Policy struct{ p *approver.Policy }

// LoadPolicy reads a policy file (YAML).
func LoadPolicy(file string) (*Policy, error) {
	p, err := approver.LoadPolicy(file)
	if err != nil {
		return nil, err
	}
	return &Policy{p: p}, nil
}

// ParsePolicy parses a policy file's contents.
func ParsePolicy(data []byte) (*Policy, error) {
	p, err := approver.ParsePolicy(data)
	if err != nil {
		return nil, err
	}
	return &Policy{p: p}, nil
}

// Decide evaluates the rules against req.
func (p *Policy) Decide(ctx context.Context, req Request) (Verdict, error) {
	v, err := p.p.Decide(ctx, req)
	if err != nil {
		return Verdict{}, err
	}
	return Verdict{v: v}, nil
}

// GenerateKey makes a signing key; give the orchestrator
// EncodePublicKey(pub) to trust.
func GenerateKey() (ed25519.PublicKey, ed25519.PrivateKey, error) {
	return ed25519.GenerateKey(rand.Reader)
}

// LoadKey reads a private key file: PKCS#8 PEM (as `approver keygen` and
// `openssl genpkey -algorithm ed25519` write) or a base64 seed or key.
func LoadKey(file string) (ed25519.PrivateKey, error) { return approver.LoadKey(file) }

// EncodePublicKey is the form orchestrators are configured with
// (--trust-approver NAME=PUBKEY): standard base64 of the 32-byte key.
func EncodePublicKey(pub ed25519.PublicKey) string { return approver.EncodePublicKey(pub) }

// String describes the verdict: "approve", "approve with args {…}",
// "deny: message" or "escalate".
func (v Verdict) String() string {
	switch {
	case v.err != nil:
		return "invalid: " + v.err.Error()
	case v.v.Action == approver.ActionApprove && len(v.v.OverrideArgs) > 0:
		return "approve with args " + string(v.v.OverrideArgs)
	case v.v.Action == approver.ActionDeny:
		return "deny: " + v.v.Message
	case v.v.Action == "":
		return string(approver.ActionEscalate)
	}
	return string(v.v.Action)
}
