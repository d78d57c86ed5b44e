package orchestrator

import (
	"maps"
	"sync"

	"github.com/toolgate/toolgate/wire"
)

// Grant is a standing decision (package wire): every later approval call
// its scope covers is decided by it when its run pauses, before anyone is
// asked.
type Grant = wire.Grant

// GrantedByPrefix starts the approver id of a decision a grant made
// ("grant:<id>"), in the call's reply and the conversation's decisions.
const GrantedByPrefix = "grant:"

// StoredGrant is a grant as the bucket holds it, with what the
// orchestrator makes of it.
type StoredGrant struct {
	Grant
	// Source is where it was given: wire.GrantKeyAPI or wire.GrantKeyBus.
	Source string `json:"source"`
	// Ignored says why the orchestrator does not apply it ("" when it
	// does): expired, unsigned, signed by a key no agent config of the
	// replica trusts, or given by an approver the tool's approvers do not
	// name. Whether it applies to a call is decided for that call, under
	// the trust and approvers of its conversation's agent config.
	Ignored string `json:"ignored,omitempty"`
}

// grantCache is the grants bucket as the orchestrator's watch of it sees
// it, so that a pause reads no bucket: its values by key, once the watch
// has caught up. Grants given or revoked through this replica are put in
// at once; those of other replicas and of approvers come with the watch.
type grantCache struct {
	mu       sync.RWMutex
	caughtUp bool
	values   map[string][]byte
}

func (gc *grantCache) set(key string, value []byte) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	if gc.values == nil {
		gc.values = map[string][]byte{}
	}
	if value == nil {
		delete(gc.values, key)
		return
	}
	gc.values[key] = value
}

func (gc *grantCache) reset(caughtUp bool) {
	gc.mu.Lock()
	defer gc.mu.Unlock()
	gc.caughtUp = caughtUp
	if !caughtUp {
		gc.values = nil
	}
}

// snapshot is the cached values; ok is false until the watch caught up.
func (gc *grantCache) snapshot() (map[string][]byte, bool) {
	gc.mu.RLock()
	defer gc.mu.RUnlock()
	return maps.Clone(gc.values), gc.caughtUp
}
