package orchestrator

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
)

// storageState remembers the last time a write failed for want of room,
// until a later write succeeds or JetStream reports room again.
type storageState struct {
	full atomic.Pointer[string]
}

// StorageFull reports whether err says the NATS server has no room to
// store it.
func StorageFull(err error) bool { return bus.StorageFull(err) }

// noteStorage records what a write's outcome says of the store's room: a
// failure for want of it (health reports it) or a success (room again).
func (o *Orchestrator) noteStorage(err error) {
	if err == nil {
		o.storageWrote()
		return
	}
	o.storageFailed(err)
}

// storageFailed records err if it says the store is full; it reports
// whether it did.
func (o *Orchestrator) storageFailed(err error) bool {
	if !bus.StorageFull(err) {
		return false
	}
	msg := err.Error()
	if o.storage.full.Swap(&msg) == nil {
		o.log.Error("the NATS server has no room to store conversations; starts are refused until it has", "error", msg)
	}
	return true
}

// storageWrote clears a recorded storage failure once a write succeeded.
func (o *Orchestrator) storageWrote() {
	if o.storage.full.Swap(nil) != nil {
		o.log.Info("the NATS server stores conversations again")
	}
}

// storageProbeKey is the index key health writes to find out whether a
// store that was full has room again (due() reads only due.* keys).
const storageProbeKey = "probe.storage"

// storageHealth reports an error naming the cause while the store has no
// room: after a write failed for want of it, health writes a small probe
// (to the index bucket, the store's other half) until one succeeds, so that
// it recovers once room is back, whatever freed it.
func (o *Orchestrator) storageHealth(ctx context.Context) error {
	last := o.storage.full.Load()
	if last == nil || o.store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := o.store.index.Put(ctx, storageProbeKey, []byte(o.clock().UTC().Format(time.RFC3339Nano)))
	if err == nil {
		o.storageWrote()
		return nil
	}
	if bus.StorageFull(err) {
		return fmt.Errorf("storage full: %s; free disk space or raise the server's JetStream max_file_store", *last)
	}
	return fmt.Errorf("storage: %s (a probe write: %v)", *last, err)
}
