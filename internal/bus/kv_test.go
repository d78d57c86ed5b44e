package bus_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
)

func TestKVCompareAndSet(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	kv := newKV(t)
	if _, err := kv.Get(ctx, "run1"); !errors.Is(err, bus.ErrKeyNotFound) {
		t.Errorf("get missing: %v", err)
	}
	rev, err := kv.Create(ctx, "run1", []byte("paused"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "run1", []byte("again")); !errors.Is(err, bus.ErrKeyExists) {
		t.Errorf("second create: %v", err)
	}
	rev2, err := kv.Update(ctx, "run1", []byte("one reply"), rev)
	if err != nil {
		t.Fatal(err)
	}
	// A stale revision loses: this is how two replicas complete a batch once.
	if _, err := kv.Update(ctx, "run1", []byte("stale"), rev); !errors.Is(err, bus.ErrRevisionMismatch) {
		t.Errorf("stale update: err = %v, want ErrRevisionMismatch", err)
	}
	e, err := kv.Get(ctx, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Value) != "one reply" || e.Revision != rev2 {
		t.Errorf("entry = %q@%d, want %q@%d", e.Value, e.Revision, "one reply", rev2)
	}
	if err := kv.Delete(ctx, "run1", rev); !errors.Is(err, bus.ErrRevisionMismatch) {
		t.Errorf("stale delete: %v", err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil || len(keys) != 1 || keys[0] != "run1" {
		t.Errorf("keys = %v, %v", keys, err)
	}

	// Concurrent Mutate loops lose no increment.
	const n = 20
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := kv.Mutate(ctx, "counter", func(v []byte, _ uint64) ([]byte, error) {
				i := 0
				if v != nil {
					i, _ = strconv.Atoi(string(v))
				}
				return []byte(strconv.Itoa(i + 1)), nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	e, err = kv.Get(ctx, "counter")
	if err != nil || string(e.Value) != strconv.Itoa(n) {
		t.Errorf("counter = %q, %v; want %d", e.Value, err, n)
	}
	stopErr := errors.New("no")
	if _, err := kv.Mutate(ctx, "counter", func([]byte, uint64) ([]byte, error) { return nil, stopErr }); !errors.Is(err, stopErr) {
		t.Errorf("mutate error = %v", err)
	}
}

func TestKVWatch(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	kv := newKV(t)
	if _, err := kv.Put(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var ops []bus.EntryOp
	var keys []string
	for e, err := range kv.Watch(wctx, "") {
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, e.Op)
		keys = append(keys, e.Key)
		switch len(ops) {
		case 2:
			if _, err := kv.Put(ctx, "b", []byte("2")); err != nil {
				t.Fatal(err)
			}
		case 3:
			if err := kv.Delete(ctx, "a", 0); err != nil {
				t.Fatal(err)
			}
		}
		if len(ops) == 4 {
			break
		}
	}
	wantOps := []bus.EntryOp{bus.OpPut, bus.OpCaughtUp, bus.OpPut, bus.OpDelete}
	wantKeys := []string{"a", "", "b", "a"}
	for i := range wantOps {
		if ops[i] != wantOps[i] || keys[i] != wantKeys[i] {
			t.Fatalf("watch = %v %q, want %v %q", ops, keys, wantOps, wantKeys)
		}
	}
}

// newKV is the index bucket of a new bus, a bucket to try KV on.
func newKV(t *testing.T) *bus.KV {
	t.Helper()
	kv, err := bustest.NewBus(t).KeyValue(bustest.Context(t), bus.BucketIndex)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// PurgeUpTo removes a key up to a revision and leaves no marker: an entry
// put again after that revision stays, and the bucket's stream stores
// nothing for the removal. List sees the keys that have a value.
func TestKVPurgeUpToAndList(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	b := bustest.NewBus(t)
	kv, err := b.KeyValue(ctx, bus.BucketIndex)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := kv.List(ctx, "", false); err != nil || len(l) != 0 {
		t.Fatalf("list of an empty bucket: %v, %v", l, err)
	}
	first, err := kv.Put(ctx, "k", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	second, err := kv.Put(ctx, "k", []byte("2"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "gone", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "gone", 0); err != nil {
		t.Fatal(err)
	}
	l, err := kv.List(ctx, "", true)
	if err != nil || len(l) != 1 || l[0].Key != "k" || string(l[0].Value) != "2" || l[0].Revision != second {
		t.Fatalf("list: %+v, %v; want k=2 at %d", l, err, second)
	}
	if l, err := kv.List(ctx, "k", false); err != nil || len(l) != 1 || len(l[0].Value) != 0 {
		t.Errorf("list without values: %+v, %v", l, err)
	}
	stream, err := b.JetStream().Stream(ctx, "KV_"+bus.BucketIndex)
	if err != nil {
		t.Fatal(err)
	}
	before, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Listed at the first revision, then put again: the entry stays.
	if err := kv.PurgeUpTo(ctx, "k", first); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, "k"); err != nil || e.Revision != second {
		t.Fatalf("after a purge up to %d: %+v, %v; want revision %d", first, e, err, second)
	}
	if err := kv.PurgeUpTo(ctx, "k", second); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "k"); !errors.Is(err, bus.ErrKeyNotFound) {
		t.Errorf("after a purge up to %d: %v; want ErrKeyNotFound", second, err)
	}
	if err := kv.PurgeUpTo(ctx, "gone", 0); err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != before.State.LastSeq || info.State.Msgs != 0 {
		t.Errorf("stream last sequence %d, %d messages; want %d and 0 (no marker)", info.State.LastSeq, info.State.Msgs, before.State.LastSeq)
	}
}

// A list ends while the keys it lists are being purged: a key that was
// there when it began and is gone when its turn comes is left out, not
// waited for. And it leaves no consumer behind.
func TestKVListWhileKeysArePurged(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	b := bustest.NewBus(t)
	index, err := b.KeyValue(ctx, bus.BucketIndex)
	if err != nil {
		t.Fatal(err)
	}
	const n = 3000
	revs := make([]uint64, n)
	for i := range n {
		if revs[i], err = index.Put(ctx, "due.c"+strconv.Itoa(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	// The lists are paced by the purges, at most one per listStep keys
	// purged, not run back to back: the server holds the purges back while
	// it makes and serves a list's consumer over 3000 keys, and lists back
	// to back made the purges a sixth as fast (3000 took 8 to 12 s on an
	// idle machine, over the test's 30 s with the package's other tests
	// running). Each list still kv while the purges go on.
	const listStep = 50
	purged := make(chan struct{})
	progress := make(chan struct{}, 1)
	go func() {
		defer close(purged)
		for i := range n {
			if err := index.PurgeUpTo(ctx, "due.c"+strconv.Itoa(i), revs[i]); err != nil {
				t.Error(err)
				return
			}
			if i%listStep == listStep-1 {
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}
	}()
	for lists := 0; ; lists++ {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := index.List(lctx, "due.>", false)
		cancel()
		if err != nil {
			t.Fatalf("list %d while purging: %v", lists, err)
		}
		if len(l) > n {
			t.Fatalf("listed %d keys of %d", len(l), n)
		}
		select {
		case <-purged:
			if l, err := index.List(ctx, "due.>", false); err != nil || len(l) != 0 {
				t.Fatalf("after the purges: %d keys, %v", len(l), err)
			}
			st, err := b.JetStream().Stream(ctx, "KV_"+bus.BucketIndex)
			if err != nil {
				t.Fatal(err)
			}
			names := st.ConsumerNames(ctx)
			for name := range names.Name() {
				t.Errorf("consumer %s left behind", name)
			}
			return
		case <-progress:
		}
	}
}
