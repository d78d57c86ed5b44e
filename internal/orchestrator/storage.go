package orchestrator

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
)

// storageState remembers the last time a write failed for want of room,
// until a later write succeeds or JetStream reports room again.
type storageState struct {
	full atomic.Pointer[string]
	log  *slog.Logger
	// probe writes a little to the store; set when the store is open
	// (before any write can fail).
	probe func(ctx context.Context) error
}

// StorageFull reports whether err says the NATS server has no room to
// store it.
func StorageFull(err error) bool { return bus.StorageFull(err) }

// note records what a write's outcome says of the store's room: a failure
// for want of it (health reports it) or a success (room again).
func (s *storageState) note(err error) {
	if err == nil {
		s.wrote()
		return
	}
	s.failed(err)
}

// failed records err if it says the store is full; it reports whether it
// did.
func (s *storageState) failed(err error) bool {
	if !bus.StorageFull(err) {
		return false
	}
	msg := err.Error()
	if s.full.Swap(&msg) == nil {
		s.log.Error("the NATS server has no room to store conversations; starts are refused until it has", "error", msg)
	}
	return true
}

// wrote clears a recorded storage failure once a write succeeded.
func (s *storageState) wrote() {
	if s.full.Swap(nil) != nil {
		s.log.Info("the NATS server stores conversations again")
	}
}

// storageProbeKey is the index key health writes to find out whether a
// store that was full has room again (due() reads only due.* keys).
const storageProbeKey = "probe.storage"

// health reports an error naming the cause while the store has no room:
// after a write failed for want of it, health writes a small probe (to the
// index bucket, the store's other half) until one succeeds, so that it
// recovers once room is back, whatever freed it.
func (s *storageState) health(ctx context.Context) error {
	last := s.full.Load()
	if last == nil || s.probe == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := s.probe(ctx)
	if err == nil {
		s.wrote()
		return nil
	}
	if bus.StorageFull(err) {
		return fmt.Errorf("storage full: %s; free disk space or raise the server's JetStream max_file_store", *last)
	}
	return fmt.Errorf("storage: %s (a probe write: %v)", *last, err)
}

// indexProbe is storageState.probe: a small write to the index bucket.
func indexProbe(index *bus.KV, clock func() time.Time) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		_, err := index.Put(ctx, storageProbeKey, []byte(clock().UTC().Format(time.RFC3339Nano)))
		return err
	}
}

// streamWatch is what the last check found missing and could not restore.
type streamWatch struct {
	mu  sync.Mutex
	err error
}

func (w *streamWatch) set(err error) {
	w.mu.Lock()
	w.err = err
	w.mu.Unlock()
}

// health is the last check's error, nil when all was there.
func (w *streamWatch) health() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
