package orchestrator

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// kvOpTimeout bounds one read or write of the runs bucket. The contexts
// handed down can be long (a run's lasts RunTimeout), and a JetStream
// request whose answer is lost, because the server the connection was on
// died or the stream's leader moved, is otherwise waited for until that
// context ends: the run would hang, its lease renewed, for the whole
// RunTimeout. Bounded, the operation fails and the usual retry paths take
// over (a nak, a relaunch after the lease, the reconcile loop).
const kvOpTimeout = 10 * time.Second

// boundedKV bounds Get, Create, Update and Put by kvOpTimeout.
type boundedKV struct {
	jetstream.KeyValue
}

func (kv boundedKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, kvOpTimeout)
	defer cancel()
	return kv.KeyValue.Get(ctx, key)
}

func (kv boundedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, kvOpTimeout)
	defer cancel()
	return kv.KeyValue.Create(ctx, key, value, opts...)
}

func (kv boundedKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, kvOpTimeout)
	defer cancel()
	return kv.KeyValue.Update(ctx, key, value, revision)
}

func (kv boundedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, kvOpTimeout)
	defer cancel()
	return kv.KeyValue.Put(ctx, key, value)
}
