package orchestrator

import (
	"maps"
	"sync"
)

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
