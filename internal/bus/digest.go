package bus

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// CanonicalJSON re-encodes a JSON text in toolgate's canonical form: object
// keys sorted bytewise, no insignificant whitespace, no HTML escaping,
// numbers exactly as written. Two texts that differ only in key order or
// spacing have the same canonical form; implementations in other languages
// reproduce it with a sorted-keys compact encoder that keeps number literals.
func CanonicalJSON(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	if trailing(raw, dec) {
		return nil, errors.New("canonical json: trailing data")
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("canonical json: %w", err)
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), nil
}

// trailing reports whether anything but whitespace follows the value dec
// has decoded from data.
func trailing(data []byte, dec *json.Decoder) bool {
	return len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) != 0
}

// DigestArgs is the hex SHA-256 of CanonicalJSON(args): the args_digest an
// ApprovalRequest carries and its Decision must return unchanged.
func DigestArgs(args json.RawMessage) (string, error) {
	c, err := CanonicalJSON(args)
	if err != nil {
		return "", fmt.Errorf("digest args: %w", err)
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

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
