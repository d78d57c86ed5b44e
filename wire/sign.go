package wire

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/toolgate/toolgate/internal/deferred"
)

// CanonicalJSON is deferred.CanonicalJSON: object keys sorted bytewise, no
// insignificant whitespace, no HTML escaping, numbers exactly as written,
// duplicate keys refused. One definition serves digests and signatures.
func CanonicalJSON(raw []byte) ([]byte, error) { return deferred.CanonicalJSON(raw) }

// DigestArgs is deferred.ArgsDigest: the hex SHA-256 of the canonical args,
// the args_digest an ApprovalRequest carries and its Decision must return
// unchanged.
func DigestArgs(args json.RawMessage) (string, error) { return deferred.ArgsDigest(args) }

// SigningBytes is what an approver signs: the canonical JSON of the
// decision's JSON form without its signature, decided_at in UTC.
func (d Decision) SigningBytes() ([]byte, error) {
	d.Signature = nil
	d.DecidedAt = d.DecidedAt.UTC()
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("decision signing bytes: %w", err)
	}
	return CanonicalJSON(raw)
}

// Sign sets d.Signature to the ed25519 signature of d.SigningBytes().
func (d *Decision) Sign(key ed25519.PrivateKey) error {
	msg, err := d.SigningBytes()
	if err != nil {
		return err
	}
	d.Signature = ed25519.Sign(key, msg)
	return nil
}

// ErrBadSignature is returned by Verify for a missing or wrong signature.
var ErrBadSignature = errors.New("decision signature does not verify")

// Verify checks d.Signature against key.
func (d Decision) Verify(key ed25519.PublicKey) error {
	if len(d.Signature) != ed25519.SignatureSize || len(key) != ed25519.PublicKeySize {
		return ErrBadSignature
	}
	msg, err := d.SigningBytes()
	if err != nil {
		return err
	}
	if !ed25519.Verify(key, msg, d.Signature) {
		return ErrBadSignature
	}
	return nil
}
