package orchestrator_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// passConfig is the seed's external agent with reconcile passes only when
// a test runs one, and a lease short enough that a paused conversation is
// indexed (once it lasted a third of it) in a fraction of a second.
func passConfig(t *testing.T) orchestrator.Config {
	return orchestrator.Config{Agent: externalAgent(t, ""), ReconcileInterval: 1 << 40, LeaseTTL: 600 * time.Millisecond}
}

// passReads runs a reconcile pass of o and returns the reads of
// conversation logs it made.
func passReads(t *testing.T, o *orchestrator.Orchestrator) int64 {
	t.Helper()
	before := o.Stats().StateReads.Load()
	if err := o.Reconcile(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return o.Stats().StateReads.Load() - before
}

// startIndexed starts n conversations that pause on a call (no worker
// for it yet) and waits until each has its entry in the due index, which
// it returns with their ids.
func startIndexed(t *testing.T, e *env, o *orchestrator.Orchestrator, n int) ([]string, jetstream.KeyValue) {
	t.Helper()
	var ids []string
	for range n {
		info, err := o.StartRun(ctxT(t), "What is the answer?", "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ConversationID)
	}
	kv := e.index()
	waitFor(t, "the paused conversations to be indexed", func() (bool, string) {
		for _, id := range ids {
			if !indexed(t, kv, id) {
				return false, id + " is not"
			}
		}
		return true, ""
	})
	return ids, kv
}

// Reconcile goes over the conversations that are not finished only: once
// a pass has dropped the finished ones from the index, a pass reads no
// log, however many finished conversations are stored.
func TestReconcileSkipsFinishedConversations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Indexed before the worker comes.
	o, _ := e.orch(passConfig(t))
	const n = 5
	ids, _ := startIndexed(t, e, o, n)
	e.worker("calculate_answer")
	for _, id := range ids {
		if c := waitStatus(t, o, id, conversation.StatusCompleted, conversation.StatusFailed); c.Status != conversation.StatusCompleted {
			t.Fatalf("status %s: %s", c.Status, c.Error)
		}
	}
	passReads(t, o) // drops the finished conversations' entries
	if reads := passReads(t, o); reads != 0 {
		t.Errorf("a reconcile pass over %d finished conversations read %d logs; want 0", n, reads)
	}
	// Nor does the index keep a delete marker per finished conversation,
	// which listing it would go over.
	index, err := e.connect("index").JetStream().Stream(ctxT(t), "KV_"+bus.BucketIndex)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := index.Info(ctxT(t)); err != nil || info.State.Msgs != 0 || info.State.LastSeq != n {
		t.Errorf("the index holds %v messages of %v stored (%v) after the finished conversations left it; want 0 of %d (an entry each, and no marker for its removal)", info.State.Msgs, info.State.LastSeq, err, n)
	}
	pending, err := o.Pending(ctxT(t))
	if err != nil || len(pending) != 0 {
		t.Errorf("pending %v, %v; want none", pending, err)
	}
}

// A reconcile pass over paused conversations this replica has cached reads
// none of their logs, not even their last records; one that is not cached
// (another replica's, or evicted) is read.
func TestReconcileReadsNoCachedPausedConversation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// No worker: they stay paused.
	o, _ := e.orch(passConfig(t))
	const n = 5
	ids, kv := startIndexed(t, e, o, n)
	if reads := passReads(t, o); reads != 0 {
		t.Errorf("a reconcile pass over %d cached paused conversations read %d times; want 0", n, reads)
	}
	// A second replica has none of them cached: it reads their last
	// records (one request), and leaves them paused and indexed.
	o2, _ := e.orch(passConfig(t))
	if reads := passReads(t, o2); reads == 0 {
		t.Error("a reconcile pass of a replica that cached none of the paused conversations read nothing")
	}
	for _, id := range ids {
		if !indexed(t, kv, id) {
			t.Errorf("%s left the index, though paused", id)
		}
	}
}

// The store lists conversations from the last record of each log, in the
// order they were created, a page at a time, filtered by status; finds finished ones by age;
// and deletes a conversation's log whole.
func TestStoreListsAndDeletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{Agent: externalAgent(t, "")})
	var ids []string
	for range 3 {
		info, err := o.StartRun(ctxT(t), "What is the answer?", "")
		if err != nil {
			t.Fatal(err)
		}
		waitStatus(t, o, info.ConversationID, conversation.StatusPaused)
		ids = append(ids, info.ConversationID)
	}
	e.worker("calculate_answer")
	for _, id := range ids {
		waitStatus(t, o, id, conversation.StatusCompleted)
	}
	started := time.Now()
	third, err := o.StartRun(ctxT(t), "What is the answer?", "")
	if err != nil {
		t.Fatal(err)
	}
	waitStatus(t, o, third.ConversationID, conversation.StatusCompleted)
	ids = append(ids, third.ConversationID)

	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		page, next, err := o.ListConversations(ctxT(t), "", 3, cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range page {
			seen = append(seen, s.ID)
			if s.Status != conversation.StatusCompleted || s.CreatedAt.IsZero() || s.UpdatedAt.Before(s.CreatedAt) {
				t.Errorf("summary %+v", s)
			}
		}
		if next == "" {
			break
		}
		if pages > 3 {
			t.Fatal("pages do not end")
		}
		cursor = next
	}
	if !slices.Equal(seen, ids) {
		t.Errorf("listed %v, want %v", seen, ids)
	}
	if page, _, err := o.ListConversations(ctxT(t), conversation.StatusPaused, 10, ""); err != nil || len(page) != 0 {
		t.Errorf("paused: %v, %v; want none", page, err)
	}

	old, err := o.FinishedBefore(ctxT(t), "sweep.test", started)
	if err != nil {
		t.Fatal(err)
	}
	if len(old) != 3 || slices.Contains(old, third.ConversationID) {
		t.Errorf("finished before the last start: %v; want the three others", old)
	}
	// The next sweep goes on from where that one ended.
	if old, err = o.FinishedBefore(ctxT(t), "sweep.test", time.Now()); err != nil || !slices.Equal(old, []string{third.ConversationID}) {
		t.Errorf("finished since: %v, %v; want the last one only", old, err)
	}

	if err := o.Delete(ctxT(t), third.ConversationID); err != nil {
		t.Fatal(err)
	}
	if _, err := o.Conversation(ctxT(t), third.ConversationID); !errors.Is(err, orchestrator.ErrNotFound) {
		t.Errorf("read after delete: %v; want not found", err)
	}
	if err := o.Delete(ctxT(t), third.ConversationID); !errors.Is(err, orchestrator.ErrNotFound) {
		t.Errorf("second delete: %v; want not found", err)
	}
	if page, _, _ := o.ListConversations(ctxT(t), "", 10, ""); len(page) != 3 {
		t.Errorf("listed %d after delete, want 3", len(page))
	}
}
