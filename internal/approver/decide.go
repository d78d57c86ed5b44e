package approver

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// Choice is a human's answer to one approval request, from the inbox or the
// command line.
type Choice struct {
	// Approve lets the call run; false denies it.
	Approve bool
	// Args, on an approval, replaces the model's args. It is checked
	// against the tool's schema first; args equal to the request's (up to
	// key order and spacing) are no override.
	Args json.RawMessage
	// Message, on a denial, is what the model is told.
	Message string
	// Metadata, on an approval, is a JSON object given to the approved
	// call's tool (the decision's metadata).
	Metadata json.RawMessage
}

// NewDecision builds, checks and (with a key) signs the decision for req
// exactly as the bot does: args_digest copied from the request, approverID,
// decided_at now in UTC. Edited args that the schema refuses are an
// *ArgsError.
func NewDecision(req wire.ApprovalRequest, approverID string, c Choice, key ed25519.PrivateKey, now time.Time) (wire.Decision, error) {
	d := wire.Decision{
		RunID:      req.RunID,
		ToolCallID: req.ToolCallID,
		ArgsDigest: req.ArgsDigest,
		Approved:   c.Approve,
		ApproverID: approverID,
		DecidedAt:  now.UTC(),
	}
	switch {
	case !c.Approve:
		if len(bytes.TrimSpace(c.Args)) != 0 {
			return wire.Decision{}, errors.New("args can only be edited on an approval")
		}
		if len(bytes.TrimSpace(c.Metadata)) != 0 {
			return wire.Decision{}, errors.New("metadata is given to the tool of an approved call only")
		}
		d.Message = c.Message
	case len(bytes.TrimSpace(c.Args)) != 0:
		if err := ValidateArgs(req.Parameters, c.Args); err != nil {
			return wire.Decision{}, err
		}
		canon, err := wire.CanonicalJSON(c.Args)
		if err != nil {
			return wire.Decision{}, &ArgsError{Problems: []string{err.Error()}}
		}
		if orig, err := wire.CanonicalJSON(req.Args); err != nil || !bytes.Equal(orig, canon) {
			d.OverrideArgs = canon
		}
	}
	if c.Approve && len(bytes.TrimSpace(c.Metadata)) != 0 {
		canon, err := wire.CanonicalJSON(c.Metadata)
		if err != nil {
			return wire.Decision{}, fmt.Errorf("metadata: %w", err)
		}
		d.Metadata = canon
	}
	if err := d.Validate(); err != nil {
		return wire.Decision{}, fmt.Errorf("decision for %s: %w", req.ToolCallID, err)
	}
	if key != nil {
		if err := Sign(key, &d); err != nil {
			return wire.Decision{}, err
		}
	}
	return d, nil
}
