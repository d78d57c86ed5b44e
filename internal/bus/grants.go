package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/toolgate/toolgate/wire"
)

// ErrGrantNotFound: no grant has the id.
var ErrGrantNotFound = errors.New("grant not found")

// PutGrant stores g in the grants bucket under source.<id> (GrantKeyAPI or
// GrantKeyBus), as its JSON. It refuses to replace a grant of the same id
// (ErrKeyExists).
func (b *Bus) PutGrant(ctx context.Context, source string, g wire.Grant) error {
	if err := g.Validate(); err != nil {
		return err
	}
	kv, err := b.Grants(ctx)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(g)
	if err != nil {
		return fmt.Errorf("grant %s: %w", g.ID, err)
	}
	if _, err := kv.Create(ctx, source+"."+g.ID, raw); err != nil {
		return fmt.Errorf("store grant %s: %w", g.ID, err)
	}
	return nil
}

// DeleteGrant deletes the grant id stored under one of sources;
// ErrGrantNotFound when none holds it.
func (b *Bus) DeleteGrant(ctx context.Context, id string, sources ...string) error {
	kv, err := b.Grants(ctx)
	if err != nil {
		return err
	}
	for _, source := range sources {
		e, err := kv.Get(ctx, source+"."+id)
		if errors.Is(err, ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		return kv.Delete(ctx, e.Key, e.Revision)
	}
	return fmt.Errorf("grant %s: %w", id, ErrGrantNotFound)
}
