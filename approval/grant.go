package approval

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// Grant is a standing decision: every later approval call of its tool that
// its scope (conversation, args digest, caller) covers is decided by it
// when its run pauses, without an approval request, until it expires or is
// revoked. See docs/protocol.md, "Standing decisions".
type Grant = wire.Grant

// GiveGrant stores g on the bus as approver id (g.GrantedBy), signed with
// key when it is not nil: an orchestrator that trusts approver keys
// applies only a grant signed by the key of its GrantedBy. An empty ID is
// made up, a zero GrantedAt is now. It returns the grant as stored. On a
// server with toolgate's users, connect as a user of role approver (with
// its inbox prefix, see New).
func GiveGrant(ctx context.Context, nc *nats.Conn, g Grant, key ed25519.PrivateKey) (Grant, error) {
	if nc == nil {
		return Grant{}, errors.New("approval: connection is nil")
	}
	if key != nil && len(key) != ed25519.PrivateKeySize {
		return Grant{}, fmt.Errorf("approval: key is %d bytes, want %d", len(key), ed25519.PrivateKeySize)
	}
	if g.ID == "" {
		var b [12]byte
		_, _ = rand.Read(b[:])
		g.ID = "g" + hex.EncodeToString(b[:])
	}
	if g.GrantedAt.IsZero() {
		g.GrantedAt = time.Now()
	}
	g.GrantedAt = g.GrantedAt.UTC()
	if !g.ExpiresAt.IsZero() {
		g.ExpiresAt = g.ExpiresAt.UTC()
	}
	g.Signature = nil
	if key != nil {
		if err := g.Sign(key); err != nil {
			return Grant{}, fmt.Errorf("approval: %w", err)
		}
	}
	err := withBus(nc, func(b *bus.Bus) error { return b.PutGrant(ctx, wire.GrantKeyBus, g) })
	if err != nil {
		return Grant{}, fmt.Errorf("approval: %w", err)
	}
	return g, nil
}

// RevokeGrant deletes a grant given on the bus (GiveGrant); calls made
// after it are asked about again.
func RevokeGrant(ctx context.Context, nc *nats.Conn, id string) error {
	if nc == nil {
		return errors.New("approval: connection is nil")
	}
	err := withBus(nc, func(b *bus.Bus) error { return b.DeleteGrant(ctx, id, wire.GrantKeyBus) })
	if err != nil {
		return fmt.Errorf("approval: %w", err)
	}
	return nil
}

func withBus(nc *nats.Conn, f func(*bus.Bus) error) error {
	b, err := bus.FromConn(nc, bus.ConnConfig{Name: "toolgate-approval-grants"})
	if err != nil {
		return err
	}
	defer b.Close()
	return f(b)
}
