package orchestrator

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/vmihailenco/msgpack/v5"
)

// newTestStore is a store on its own embedded server.
func newTestStore(t *testing.T, cacheBytes int64) *store {
	t.Helper()
	b := bustest.NewBus(t)
	index, err := b.KeyValue(bustest.Context(t), bus.BucketIndex)
	if err != nil {
		t.Fatal(err)
	}
	return &store{bus: b, index: index, fresh: newFreshSet(), instance: "me", cache: newStateCache(cacheBytes), clock: time.Now,
		observer: &Counts{}}
}

// A log of many records (more than one batch of reads) folds back into the
// state that wrote it, in a store that never saw it, and a writer whose
// state is stale catches up instead of overwriting.
func TestLogFoldsManyRecordsAndCatchesUp(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	writer := newTestStore(t, 64<<20)
	now := time.Now().UTC()
	c := conversation.New("clong", conversation.RunRecord{RunID: "r1_clong", Status: conversation.StatusRunning, StartedAt: now},
		&conversation.Lease{Owner: "me", RunID: "r1_clong", Until: now.Add(time.Hour)}, now)
	if _, err := writer.create(ctx, c); err != nil {
		t.Fatal(err)
	}
	const records = 700 // over ten batches of a direct get (bus.ReadLog)
	for i := range records {
		_, err := writer.update(ctx, "clong", func(c *conversation.State) error {
			c.History = append(c.History, agent.Message{Kind: agent.KindRequest, Parts: []agent.Part{{Kind: agent.PartUserPrompt, Content: fmt.Sprint(i)}}})
			c.StaleReplies = i
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want, _, err := writer.get(ctx, "clong")
	if err != nil {
		t.Fatal(err)
	}
	if len(want.History) != records || want.History[records-1].Parts[0].Content != fmt.Sprint(records-1) {
		t.Fatalf("writer's state has %d messages", len(want.History))
	}

	// Another replica, with nothing cached, reads the same state.
	reader := &store{bus: writer.bus, index: writer.index, fresh: newFreshSet(), cache: newStateCache(64 << 20), clock: time.Now, observer: &Counts{}}
	got, seq, err := reader.get(ctx, "clong")
	if err != nil {
		t.Fatal(err)
	}
	if a, b := encodeSorted(got), encodeSorted(want); string(a) != string(b) {
		t.Fatalf("folded state differs: %d messages, stale %d; want %d, %d", len(got.History), got.StaleReplies, len(want.History), want.StaleReplies)
	}

	// The writer appends once more; the reader, whose state is now stale,
	// makes its change on top of it rather than over it.
	if _, err := writer.update(ctx, "clong", func(c *conversation.State) error { c.Output = "from the writer"; return nil }); err != nil {
		t.Fatal(err)
	}
	c2, _, err := reader.updateFrom(ctx, "clong", got, seq, func(c *conversation.State) error { c.Error = "from the reader"; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if c2.Output != "from the writer" || c2.Error != "from the reader" {
		t.Errorf("after the conflict: output %q, error %q; want both changes", c2.Output, c2.Error)
	}
	final, _, err := writer.get(ctx, "clong")
	if err != nil {
		t.Fatal(err)
	}
	if final.Output != "from the writer" || final.Error != "from the reader" || len(final.History) != records {
		t.Errorf("stored: output %q, error %q, %d messages", final.Output, final.Error, len(final.History))
	}
}

// The cache keeps to its budget, least recently used first out.
func TestStateCacheBudget(t *testing.T) {
	sc := newStateCache(cacheHeap(100))
	for i := range 10 {
		sc.put(fmt.Sprint(i), &conversation.State{}, uint64(i+1), 30)
	}
	if sc.len() != 3 || sc.used > 100 {
		t.Fatalf("%d states, %d bytes cached; want 3, at most 100", sc.len(), sc.used)
	}
	if _, _, ok := sc.get("9"); !ok {
		t.Error("the last state put is not cached")
	}
	if _, _, ok := sc.get("0"); ok {
		t.Error("the first state put is still cached")
	}
	sc.put("9", &conversation.State{Output: "old"}, 1, 30)
	if c, seq, _ := sc.get("9"); seq != 10 || c.Output == "old" {
		t.Errorf("an older state replaced a newer one (seq %d)", seq)
	}
}

// A conversation is indexed once it has lasted: the fresh set keeps it
// until then, below the watermark, and its first record names its
// replica; indexFresh indexes those that are not finished and forgets
// the others.
func TestFreshConversationsIndexedWhenOld(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	s := newTestStore(t, 1<<20)
	now := time.Now().UTC()
	start := func(id string) uint64 {
		t.Helper()
		c := conversation.New(id, conversation.RunRecord{RunID: "r1_" + id, Status: conversation.StatusRunning, StartedAt: now},
			&conversation.Lease{Owner: "me", RunID: "r1_" + id, Until: now.Add(time.Hour)}, now)
		seq, err := s.create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}
	first := start("cfresh1")
	second := start("cfresh2")
	if w := s.fresh.watermark(); w != first-1 {
		t.Errorf("watermark %d; want %d, below the first record of the oldest", w, first-1)
	}
	last, err := s.bus.LastLogMsgs(ctx, bus.StreamConversations, []string{bus.ConversationSubject("cfresh2")})
	if err != nil || last[bus.ConversationSubject("cfresh2")].Header.Get(hdrOrigin) != "me" {
		t.Errorf("the first record does not name its replica (%v)", err)
	}
	if _, err := s.update(ctx, "cfresh1", func(c *conversation.State) error {
		return c.Complete("me", "r1_cfresh1", nil, "done", now)
	}); err != nil {
		t.Fatal(err)
	}
	if w := s.fresh.watermark(); w != second-1 {
		t.Errorf("watermark %d after the first finished; want %d", w, second-1)
	}
	if err := s.indexFresh(ctx, now.Add(-time.Hour)); err != nil || s.fresh.len() != 1 {
		t.Fatalf("indexing nothing old: %v, %d left; want 1", err, s.fresh.len())
	}
	if err := s.indexFresh(ctx, time.Time{}); err != nil {
		t.Fatal(err)
	}
	due, err := s.due(ctx)
	if err != nil || len(due) != 1 || due[0].id != "cfresh2" {
		t.Errorf("due %+v (%v); want cfresh2 only", due, err)
	}
	if n := s.fresh.len(); n != 0 {
		t.Errorf("%d conversations still fresh", n)
	}
	if w := s.fresh.watermark(); w != s.fresh.highest.Load() || w < second {
		t.Errorf("watermark %d with none fresh; want the highest sequence seen (%d)", w, s.fresh.highest.Load())
	}
	// A conversation created again keeps its first entry.
	if !s.fresh.add("x", now) || s.fresh.add("x", now) {
		t.Error("add does not tell a new conversation from one it holds")
	}
}

// The cache's default budget follows the Go memory limit when one is set.
func TestDefaultStateCacheBytes(t *testing.T) {
	for _, c := range []struct{ limit, want int64 }{
		{math.MaxInt64, 256 << 20},
		{4 << 30, 1 << 30},
		{128 << 20, 64 << 20},
	} {
		if got := defaultStateCacheBytes(c.limit); got != c.want {
			t.Errorf("limit %d: budget %d, want %d", c.limit, got, c.want)
		}
	}
}

// A finished conversation is the first out of a full cache: the paused
// ones put before it stay.
func TestStateCacheDropsFinishedFirst(t *testing.T) {
	// Room for the three paused and, within its share, the finished one;
	// not for all four.
	sc := newStateCache(cacheHeap(6400))
	sc.put("paused1", &conversation.State{Status: conversation.StatusPaused}, 1, 2120)
	sc.put("paused2", &conversation.State{Status: conversation.StatusPaused}, 1, 2120)
	sc.put("done", &conversation.State{Status: conversation.StatusCompleted}, 1, 90)
	if _, _, ok := sc.peek("done"); !ok {
		t.Fatal("the finished conversation was dropped while there was room")
	}
	sc.put("paused3", &conversation.State{Status: conversation.StatusPaused}, 1, 2120)
	for _, id := range []string{"paused1", "paused2", "paused3"} {
		if _, _, ok := sc.get(id); !ok {
			t.Errorf("%s was dropped", id)
		}
	}
	if _, _, ok := sc.get("done"); ok {
		t.Error("the finished conversation stayed while paused ones were dropped")
	}
}

// Finished conversations keep to their share of the budget, the least
// recently used out first, however much room the unfinished leave; one
// that finishes joins them.
func TestStateCacheFinishedKeepToTheirShare(t *testing.T) {
	sc := newStateCache(cacheHeap(100) * finishedShare) // finished: 100 bytes
	sc.put("paused", &conversation.State{Status: conversation.StatusPaused}, 1, 30)
	for i := range 10 {
		sc.put(fmt.Sprint("done", i), &conversation.State{Status: conversation.StatusCompleted}, 1, 30)
	}
	cached := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			if _, _, ok := sc.peek(id); !ok {
				t.Errorf("%s is not cached", id)
			}
		}
	}
	cached("paused", "done7", "done8", "done9")
	if sc.len() != 4 || sc.doneUsed != 90 {
		t.Errorf("%d states cached, %d bytes finished; want 4, 90", sc.len(), sc.doneUsed)
	}
	sc.get("done7") // used again: done8 is now the least recently used
	sc.put("paused", &conversation.State{Status: conversation.StatusFailed}, 2, 30)
	cached("paused", "done7", "done9")
	if _, _, ok := sc.peek("done8"); ok || sc.len() != 3 || sc.used != 90 {
		t.Errorf("done8 cached %v, %d states, %d bytes; want it out, 3 states, 90 bytes", ok, sc.len(), sc.used)
	}
}

// A look at a cached state (reconcile's) does not count as a use: the
// state looked at is still the first out, and unfinished says what the
// cache holds.
func TestStateCachePeekIsNoUse(t *testing.T) {
	sc := newStateCache(cacheHeap(70))
	sc.put("old", &conversation.State{Status: conversation.StatusPaused}, 1, 30)
	sc.put("new", &conversation.State{Status: conversation.StatusPaused}, 1, 30)
	sc.put("done", &conversation.State{Status: conversation.StatusCompleted}, 1, 5)
	if c, _, ok := sc.peek("old"); !ok || c.Status != conversation.StatusPaused {
		t.Fatalf("peek old: %v, %v", c, ok)
	}
	if !sc.unfinished("old") || sc.unfinished("done") || sc.unfinished("absent") {
		t.Errorf("unfinished: old %v, done %v, absent %v; want true, false, false", sc.unfinished("old"), sc.unfinished("done"), sc.unfinished("absent"))
	}
	sc.put("newer", &conversation.State{Status: conversation.StatusPaused}, 1, 30)
	if _, _, ok := sc.peek("old"); ok {
		t.Error("the state only looked at stayed; the least recently used should have gone")
	}
	if _, _, ok := sc.peek("new"); !ok {
		t.Error("a state used after the one looked at was dropped")
	}
}

// encodeSorted is v's encoding with map keys sorted: equal values, equal
// encodings.
func encodeSorted(v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		return []byte(err.Error())
	}
	return buf.Bytes()
}

// A sweep by age goes through a long stretch in steps of at most sweepScan
// records, its cursor moved after each, whether or not the step found
// anything to act on.
func TestSweepGoesThroughALongStretchInSteps(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	s := newTestStore(t, 64<<20)
	s.scanLimit = 3
	now := time.Now().UTC()
	var last uint64
	for i := range 10 {
		id := fmt.Sprintf("c%02d", i)
		c := conversation.New(id, conversation.RunRecord{RunID: "r1_" + id, Status: conversation.StatusRunning, StartedAt: now},
			&conversation.Lease{Owner: "me", RunID: "r1_" + id, Until: now.Add(time.Hour)}, now)
		seq, err := s.create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		last = seq
	}
	cutoff := time.Now().Add(time.Hour)
	var batches [][]string
	collect := func(sums []ConversationSummary) error {
		var ids []string
		for _, sum := range sums {
			ids = append(ids, sum.ID)
		}
		batches = append(batches, ids)
		return nil
	}
	if err := s.sweepAged(ctx, "sweep.steps", cutoff, nil, collect); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(batches); got != "[[c00 c01 c02] [c03 c04 c05] [c06 c07 c08] [c09]]" {
		t.Errorf("batches %s; want steps of 3", got)
	}
	if cur, err := s.sweepCursor(ctx, "sweep.steps"); err != nil || cur != last {
		t.Errorf("cursor %d, %v; want %d", cur, err, last)
	}

	// Nothing to act on: the steps move the cursor all the same.
	never := func(bus.HeaderMsg) bool { return false }
	err := s.sweepAged(ctx, "sweep.none", cutoff, never, func([]ConversationSummary) error {
		t.Error("acted on nothing")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cur, err := s.sweepCursor(ctx, "sweep.none"); err != nil || cur != last {
		t.Errorf("cursor %d, %v; want %d", cur, err, last)
	}
	// A failed act leaves the cursor before its batch.
	failed := errors.New("failed")
	err = s.sweepAged(ctx, "sweep.failed", cutoff, nil, func(sums []ConversationSummary) error {
		if sums[0].ID == "c03" {
			return failed
		}
		return nil
	})
	if !errors.Is(err, failed) {
		t.Fatalf("sweep: %v; want the act's error", err)
	}
	again := 0
	if err := s.sweepAged(ctx, "sweep.failed", cutoff, nil, func(sums []ConversationSummary) error {
		if again == 0 && sums[0].ID != "c03" {
			t.Errorf("the next sweep began at %s; want c03", sums[0].ID)
		}
		again++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A list of every conversation comes in the order they were created, not
// in id order, however many records each has; a request goes through at
// most sweepScan records, so a filter that nothing passes gives empty
// pages with cursors that go on, not one request over the whole stream.
func TestListGoesOverTheStreamInCreationOrder(t *testing.T) {
	t.Parallel()
	ctx := bustest.Context(t)
	s := newTestStore(t, 64<<20)
	now := time.Now().UTC()
	var ids []string
	for i := range 10 {
		id := fmt.Sprintf("c%02d", 9-i) // created in reverse id order
		c := conversation.New(id, conversation.RunRecord{RunID: "r1_" + id, Status: conversation.StatusRunning, StartedAt: now},
			&conversation.Lease{Owner: "me", RunID: "r1_" + id, Until: now.Add(time.Hour)}, now)
		seq, err := s.create(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			// A second record, between the first records of others.
			if _, _, err := s.append(ctx, c, seq, conversation.FullRecord(c)); err != nil {
				t.Fatal(err)
			}
		}
		ids = append(ids, id)
	}
	pages := func(f listFilter) (got []string, sizes []int) {
		t.Helper()
		for n := 0; ; n++ {
			if n > 20 {
				t.Fatalf("%+v: the pages do not end", f)
			}
			page, next, err := s.list(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, sum := range page {
				got = append(got, sum.ID)
			}
			sizes = append(sizes, len(page))
			if next == "" {
				return got, sizes
			}
			f.Cursor = next
		}
	}
	if got, sizes := pages(listFilter{Limit: 3}); !slices.Equal(got, ids) || fmt.Sprint(sizes) != "[3 3 3 1]" {
		t.Errorf("pages of 3: %v in pages of %v; want %v in [3 3 3 1]", got, sizes, ids)
	}
	s.scanLimit = 4
	if got, _ := pages(listFilter{Limit: 3}); !slices.Equal(got, ids) {
		t.Errorf("pages of 3, 4 records a request: %v; want %v", got, ids)
	}
	// 14 records, 4 a request.
	if got, sizes := pages(listFilter{Status: conversation.StatusCompleted, Limit: 3}); len(got) != 0 || fmt.Sprint(sizes) != "[0 0 0 0]" {
		t.Errorf("completed ones, 4 records a request: %v in pages of %v; want none in [0 0 0 0]", got, sizes)
	}
	if _, _, err := s.list(ctx, listFilter{Cursor: "c00"}); err == nil {
		t.Error("an id as the cursor of a list of all: no error")
	}
}
