package wire

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"time"
)

// BucketGrants is the KV bucket of standing decisions (Grant), one key per
// grant: GrantKeyAPI.<id> for grants given over the orchestrator's HTTP
// API, GrantKeyBus.<id> for grants an approver put on the bus itself.
const BucketGrants = "toolgate_grants"

// Key prefixes of BucketGrants. Only the orchestrator may write under
// GrantKeyAPI (it authenticated their giver); approvers write under
// GrantKeyBus, where a grant must be signed when the agent config of the
// conversation it would decide trusts approver keys.
const (
	GrantKeyAPI = "api"
	GrantKeyBus = "bus"
)

// Grant is a standing decision: every later approval call of Tool that its
// scope covers is decided by it, without asking anyone, until ExpiresAt.
// A scope left empty covers everything: a grant with only Tool covers
// every call of the tool. Stored in BucketGrants as its JSON form.
type Grant struct {
	// ID names the grant: a token (no '.', '*', '>', …) unique in the
	// bucket.
	ID string `json:"id" msgpack:"id"`
	// Tool is the tool whose calls it decides. Required.
	Tool string `json:"tool" msgpack:"tool"`
	// Approved: true approves the calls it covers; false is a standing
	// denial (the model is told Message).
	Approved bool `json:"approved" msgpack:"approved"`
	// ConversationID narrows it to the calls of one conversation.
	ConversationID string `json:"conversation_id,omitempty" msgpack:"conversation_id,omitempty"`
	// ArgsDigest narrows it to calls with exactly these args (the hex
	// SHA-256 of their canonical JSON, the args_digest of an approval
	// request).
	ArgsDigest string `json:"args_digest,omitempty" msgpack:"args_digest,omitempty"`
	// Caller narrows it to the runs whose caller object has this "id".
	Caller string `json:"caller,omitempty" msgpack:"caller,omitempty"`
	// Message is, for a denial, what the model is told.
	Message string `json:"message,omitempty" msgpack:"message,omitempty"`
	// GrantedBy is who gave it: an approver id (which selects the key its
	// signature is checked with) or the API caller's name.
	GrantedBy string    `json:"granted_by" msgpack:"granted_by"`
	GrantedAt time.Time `json:"granted_at" msgpack:"granted_at"`
	// ExpiresAt ends it; zero never does.
	ExpiresAt time.Time `json:"expires_at,omitzero" msgpack:"expires_at,omitempty"`
	// Signature is ed25519 over SigningBytes by GrantedBy's key.
	Signature []byte `json:"signature,omitempty" msgpack:"signature,omitempty"`
}

// Validate checks a grant's fields.
func (g Grant) Validate() error {
	c := checker{msg: "grant"}
	c.token("id", g.ID)
	c.token("tool", g.Tool)
	if g.ConversationID != "" {
		c.token("conversation_id", g.ConversationID)
	}
	if g.ArgsDigest != "" {
		c.digest("args_digest", g.ArgsDigest)
	}
	if g.Caller != "" {
		c.id("caller", g.Caller)
	}
	if g.Approved && g.Message != "" {
		c.fail("message", "is for a denial")
	}
	c.id("granted_by", g.GrantedBy)
	if g.GrantedAt.IsZero() {
		c.fail("granted_at", "is missing")
	}
	c.when("granted_at", g.GrantedAt)
	c.when("expires_at", g.ExpiresAt)
	if !g.ExpiresAt.IsZero() && !g.ExpiresAt.After(g.GrantedAt) {
		c.fail("expires_at", "is not after granted_at")
	}
	if len(g.Signature) != 0 && len(g.Signature) != ed25519.SignatureSize {
		c.fail("signature", "is %d bytes, want %d", len(g.Signature), ed25519.SignatureSize)
	}
	return c.err
}

// Live reports whether the grant is in force at now.
func (g Grant) Live(now time.Time) bool { return g.ExpiresAt.IsZero() || now.Before(g.ExpiresAt) }

// Covers reports whether the grant decides a call of tool with args digest
// digest, in conversation convID, of a run whose caller object has the id
// caller ("" when it has none).
func (g Grant) Covers(tool, digest, convID, caller string) bool {
	return g.Tool == tool &&
		(g.ArgsDigest == "" || g.ArgsDigest == digest) &&
		(g.ConversationID == "" || g.ConversationID == convID) &&
		(g.Caller == "" || g.Caller == caller)
}

// SigningBytes is what a grant's giver signs: the canonical JSON of its
// JSON form without the signature, times in UTC.
func (g Grant) SigningBytes() ([]byte, error) {
	g.Signature = nil
	g.GrantedAt = g.GrantedAt.UTC()
	if !g.ExpiresAt.IsZero() {
		g.ExpiresAt = g.ExpiresAt.UTC()
	}
	raw, err := json.Marshal(g)
	if err != nil {
		return nil, fmt.Errorf("grant signing bytes: %w", err)
	}
	return CanonicalJSON(raw)
}

// Sign sets g.Signature to the ed25519 signature of g.SigningBytes().
func (g *Grant) Sign(key ed25519.PrivateKey) error {
	msg, err := g.SigningBytes()
	if err != nil {
		return err
	}
	g.Signature = ed25519.Sign(key, msg)
	return nil
}

// Verify checks g.Signature against key (ErrBadSignature).
func (g Grant) Verify(key ed25519.PublicKey) error {
	if len(g.Signature) != ed25519.SignatureSize || len(key) != ed25519.PublicKeySize {
		return ErrBadSignature
	}
	msg, err := g.SigningBytes()
	if err != nil {
		return err
	}
	if !ed25519.Verify(key, msg, g.Signature) {
		return ErrBadSignature
	}
	return nil
}
