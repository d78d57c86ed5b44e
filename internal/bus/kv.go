package bus

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// KV errors callers branch on (errors.Is).
var (
	ErrKeyNotFound      = jetstream.ErrKeyNotFound
	ErrKeyExists        = jetstream.ErrKeyExists
	ErrRevisionMismatch = jetstream.ErrKeyRevisionMismatch
)

// KV is a thin view of a JetStream key-value bucket for compare-and-set
// loops: Get, then Update with the revision read; on ErrRevisionMismatch
// read again and retry (or use Mutate).
type KV struct {
	kv jetstream.KeyValue
	b  *Bus
}

// EntryOp is what a watched entry is.
type EntryOp int

const (
	OpPut      EntryOp = iota
	OpDelete           // deleted (Value is empty)
	OpPurge            // purged or expired by TTL
	OpCaughtUp         // marker: every entry that existed when the watch began has been seen
)

// Entry is one value of a key.
type Entry struct {
	Key      string
	Value    []byte
	Revision uint64
	Created  time.Time
	Op       EntryOp
}

func entryOf(e jetstream.KeyValueEntry) Entry {
	op := OpPut
	switch e.Operation() {
	case jetstream.KeyValueDelete:
		op = OpDelete
	case jetstream.KeyValuePurge:
		op = OpPurge
	}
	return Entry{Key: e.Key(), Value: e.Value(), Revision: e.Revision(), Created: e.Created(), Op: op}
}

// KeyValue opens a bucket created by Setup.
func (b *Bus) KeyValue(ctx context.Context, bucket string) (*KV, error) {
	gctx, release := b.deny.guard(ctx, jsAPIFor("KV_"+bucket))
	kv, err := b.js.KeyValue(gctx, bucket)
	if derr := denied(gctx); derr != nil {
		err = derr
	}
	release()
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", bucket, errNotSetUp(err))
	}
	return &KV{kv: kv, b: b}, nil
}

// Grants opens the toolgate_grants bucket.
func (b *Bus) Grants(ctx context.Context) (*KV, error) { return b.KeyValue(ctx, wire.BucketGrants) }

// Tools opens the toolgate_tools bucket.
func (b *Bus) Tools(ctx context.Context) (*KV, error) { return b.KeyValue(ctx, wire.BucketTools) }

// Bucket is the bucket's name.
func (k *KV) Bucket() string { return k.kv.Bucket() }

// Get reads the latest value of key; ErrKeyNotFound if it has none (or was
// deleted).
func (k *KV) Get(ctx context.Context, key string) (Entry, error) {
	e, err := k.kv.Get(ctx, key)
	if err != nil {
		return Entry{}, fmt.Errorf("kv get %s/%s: %w", k.kv.Bucket(), key, err)
	}
	return entryOf(e), nil
}

// Create stores value under key only if the key has no value; otherwise
// ErrKeyExists.
func (k *KV) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := k.kv.Create(ctx, key, value)
	if err != nil {
		return 0, fmt.Errorf("kv create %s/%s: %w", k.kv.Bucket(), key, err)
	}
	return rev, nil
}

// Update stores value under key only if its latest revision is revision;
// otherwise ErrRevisionMismatch.
func (k *KV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	rev, err := k.kv.Update(ctx, key, value, revision)
	if err != nil {
		return 0, fmt.Errorf("kv update %s/%s@%d: %w", k.kv.Bucket(), key, revision, err)
	}
	return rev, nil
}

// Put stores value under key unconditionally.
func (k *KV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := k.kv.Put(ctx, key, value)
	if err != nil {
		return 0, fmt.Errorf("kv put %s/%s: %w", k.kv.Bucket(), key, err)
	}
	return rev, nil
}

// Delete deletes key; revision > 0 deletes only if it is still the latest.
func (k *KV) Delete(ctx context.Context, key string, revision uint64) error {
	var opts []jetstream.KVDeleteOpt
	if revision > 0 {
		opts = append(opts, jetstream.LastRevision(revision))
	}
	if err := k.kv.Delete(ctx, key, opts...); err != nil {
		return fmt.Errorf("kv delete %s/%s: %w", k.kv.Bucket(), key, mapDeleteMismatch(err))
	}
	return nil
}

func mapDeleteMismatch(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return fmt.Errorf("%w: %w", err, ErrRevisionMismatch)
	}
	return err
}

// Keys lists the keys that have a value; none is an empty list.
func (k *KV) Keys(ctx context.Context) ([]string, error) {
	keys, err := k.kv.Keys(ctx)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kv keys %s: %w", k.kv.Bucket(), err)
	}
	return keys, nil
}

// Mutate is a compare-and-set loop: it reads key, calls f with the current
// value (nil and revision 0 if there is none), and stores f's result by
// revision, retrying on a concurrent change. f may be called several times
// and must not have side effects; its error aborts the loop unchanged.
func (k *KV) Mutate(ctx context.Context, key string, f func(value []byte, revision uint64) ([]byte, error)) (uint64, error) {
	for {
		var cur []byte
		var rev uint64
		e, err := k.kv.Get(ctx, key)
		switch {
		case err == nil:
			cur, rev = e.Value(), e.Revision()
		case errors.Is(err, jetstream.ErrKeyNotFound):
		default:
			return 0, fmt.Errorf("kv mutate %s/%s: %w", k.kv.Bucket(), key, err)
		}
		next, err := f(cur, rev)
		if err != nil {
			return 0, err
		}
		var nrev uint64
		if rev == 0 {
			nrev, err = k.kv.Create(ctx, key, next)
		} else {
			nrev, err = k.kv.Update(ctx, key, next, rev)
		}
		if err == nil {
			return nrev, nil
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			continue
		}
		return 0, fmt.Errorf("kv mutate %s/%s: %w", k.kv.Bucket(), key, err)
	}
}

// Watch yields the current entries matching pattern (a key or a wildcard
// such as "run.*"; "" is every key), one OpCaughtUp marker, then every
// change until ctx ends or the caller stops iterating.
func (k *KV) Watch(ctx context.Context, pattern string) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		if pattern == "" {
			pattern = ">"
		}
		w, err := k.kv.Watch(ctx, pattern)
		if err != nil {
			yield(Entry{}, fmt.Errorf("kv watch %s/%s: %w", k.kv.Bucket(), pattern, err))
			return
		}
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					if !yield(Entry{Op: OpCaughtUp}, nil) {
						return
					}
					continue
				}
				if !yield(entryOf(e), nil) {
					return
				}
			}
		}
	}
}

// PurgeUpTo removes the messages of key up to revision upTo (0: all of
// them) without leaving a marker: an entry put again after upTo stays. A
// delete leaves a marker message behind, one stored message more per key
// that is put and removed again, and listing the bucket goes over the
// markers until they are purged.
func (k *KV) PurgeUpTo(ctx context.Context, key string, upTo uint64) error {
	st, err := k.b.stream(ctx, "KV_"+k.kv.Bucket())
	if err != nil {
		return fmt.Errorf("kv purge %s/%s: %w", k.kv.Bucket(), key, err)
	}
	opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject("$KV." + k.kv.Bucket() + "." + key)}
	if upTo > 0 {
		opts = append(opts, jetstream.WithPurgeSequence(upTo+1))
	}
	if err := st.Purge(ctx, opts...); err != nil {
		return fmt.Errorf("kv purge %s/%s: %w", k.kv.Bucket(), key, err)
	}
	return nil
}

// List is the entries under pattern (a key or a wildcard; "" is every
// key) as they are now: the values, with their revisions, of the keys that
// have one; without the values unless withValues. An empty bucket is told
// by one request, without a watch.
func (k *KV) List(ctx context.Context, pattern string, withValues bool) ([]Entry, error) {
	return k.list(ctx, pattern, withValues)
}

func (k *KV) list(ctx context.Context, pattern string, withValues bool) ([]Entry, error) {
	if pattern == "" {
		pattern = ">"
	}
	bucket := k.kv.Bucket()
	fail := func(err error) ([]Entry, error) {
		return nil, fmt.Errorf("kv list %s/%s: %w", bucket, pattern, err)
	}
	st, err := k.kv.Status(ctx)
	if err != nil {
		return fail(err)
	}
	if st.Values() == 0 {
		return nil, nil
	}
	// The last message of each key (readOnce: a KV watcher waited for
	// ever for a key purged while it listed).
	prefix := "$KV." + bucket + "."
	var out []Entry
	err = k.b.readOnce(ctx, "KV_"+bucket, false, jetstream.ConsumerConfig{
		FilterSubject: prefix + pattern,
		DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
		HeadersOnly:   !withValues,
	}, func(m jetstream.Msg, meta *jetstream.MsgMetadata) bool {
		switch m.Headers().Get(kvOperation) {
		case kvOpDelete, kvOpPurge:
			// The marker of a key without a value now.
			return true
		}
		e := Entry{Key: strings.TrimPrefix(m.Subject(), prefix), Revision: meta.Sequence.Stream, Created: meta.Timestamp, Op: OpPut}
		if withValues {
			e.Value = m.Data()
		}
		out = append(out, e)
		return true
	})
	if err != nil {
		return fail(err)
	}
	return out, nil
}

// A KV message's operation header (a put has none).
const (
	kvOperation = "KV-Operation"
	kvOpDelete  = "DEL"
	kvOpPurge   = "PURGE"
)
