package approver

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/toolgate/toolgate/wire"
)

// Sign sets d.Signature to the ed25519 signature of d's canonical signing
// bytes, wire.Decision.SigningBytes: the canonical JSON (sorted keys, compact,
// no HTML escaping) of the decision's JSON form with the signature left out
// and decided_at in UTC. Sign last: any field changed afterwards breaks the
// signature.
func Sign(key ed25519.PrivateKey, d *wire.Decision) error {
	if len(key) != ed25519.PrivateKeySize {
		return fmt.Errorf("sign decision: private key is %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	if err := d.Sign(key); err != nil {
		return fmt.Errorf("sign decision: %w", err)
	}
	return nil
}

// Verify checks d.Signature against pub over the same signing bytes Sign
// uses. A missing or wrong signature is wire.ErrBadSignature.
func Verify(pub ed25519.PublicKey, d wire.Decision) error {
	if err := d.Verify(pub); err != nil {
		return fmt.Errorf("verify decision %s from %s: %w", d.ToolCallID, d.ApproverID, err)
	}
	return nil
}

const pemTypePrivateKey = "PRIVATE KEY"

// GenerateKey creates a new ed25519 key, writes the private key to file as a
// PKCS#8 PEM block with mode 0600 and returns the public key. An existing
// file is never overwritten: losing a key that orchestrators trust would be
// worse than a failed command.
func GenerateKey(file string) (ed25519.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	if err := pem.Encode(f, &pem.Block{Type: pemTypePrivateKey, Bytes: der}); err != nil {
		f.Close()
		return nil, fmt.Errorf("generate key: write %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("generate key: write %s: %w", file, err)
	}
	return pub, nil
}

// LoadKey reads a private key written by GenerateKey (PKCS#8 PEM, as
// `openssl genpkey -algorithm ed25519` also writes), or a base64 32-byte
// seed or 64-byte private key on a line of its own.
func LoadKey(file string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("load key: %w", err)
	}
	key, err := ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("load key %s: %w", file, err)
	}
	return key, nil
}

// ParsePrivateKey parses the forms LoadKey accepts.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	if block, _ := pem.Decode(data); block != nil {
		if block.Type != pemTypePrivateKey {
			return nil, fmt.Errorf("PEM block is %q, want %q", block.Type, pemTypePrivateKey)
		}
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, err
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("key is %T, want ed25519", k)
		}
		return priv, nil
	}
	raw, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(data)))
	if err != nil {
		return nil, errors.New("neither a PEM block nor base64")
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		priv := ed25519.PrivateKey(raw)
		// The second half of a private key is its public key; a mismatch
		// means a corrupt file that would sign with a key nobody trusts.
		if !bytes.Equal(ed25519.NewKeyFromSeed(priv.Seed()), priv) {
			return nil, errors.New("private key does not match its public half")
		}
		return priv, nil
	default:
		return nil, fmt.Errorf("base64 key is %d bytes, want %d or %d", len(raw), ed25519.SeedSize, ed25519.PrivateKeySize)
	}
}

// EncodePublicKey is the form orchestrators are configured with: standard
// base64 of the 32-byte key.
func EncodePublicKey(pub ed25519.PublicKey) string {
	return base64.StdEncoding.EncodeToString(pub)
}

// ParsePublicKey parses EncodePublicKey's form.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("parse public key: %w", err)
	}
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("parse public key: %d bytes, want %d", len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}
