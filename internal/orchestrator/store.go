package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/wire"
)

// ErrNotFound is returned for a conversation or run that does not exist.
var ErrNotFound = errors.New("not found")

// BadRequestError says what is wrong with a request's parameters.
type BadRequestError struct{ Msg string }

func (e *BadRequestError) Error() string { return e.Msg }

// errExists refuses to create a conversation whose log has records.
var errExists = errors.New("conversation exists")

// errDeleted is ErrNotFound for a conversation whose log ends with its
// tombstone (StatusDeleted): deleted, or being deleted.
var errDeleted = fmt.Errorf("%w (deleted)", ErrNotFound)

// maxCASAttempts bounds the catch-up-and-retry loop of one update; reaching
// it means a pathological contention on one conversation.
const maxCASAttempts = 64

// TooLargeError says a record would not fit in one atomic batch of parts
// (bus.LogTooLargeError); nothing was written.
type TooLargeError struct {
	ConversationID string
	Bytes, Limit   int
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("conversation %s: one change of %d bytes is over the store's limit of %d", e.ConversationID, e.Bytes, e.Limit)
}

// CorruptError says a conversation's log holds a record that cannot be
// read or applied: the conversation cannot be read until it is deleted
// (Orchestrator.DeleteCorrupt). Everything else goes on around it.
type CorruptError struct {
	ConversationID string
	// Sequence is the record's; 0 when the server cannot load it at all
	// (damaged on disk: Err says after which record).
	Sequence uint64
	Err      error
}

func (e *CorruptError) Error() string {
	if e.Sequence == 0 {
		return fmt.Sprintf("conversation %s is corrupt: %v", e.ConversationID, e.Err)
	}
	return fmt.Sprintf("conversation %s is corrupt: its record %d cannot be read: %v", e.ConversationID, e.Sequence, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// tooLarge returns the TooLargeError in err, if any.
func tooLarge(err error) *TooLargeError {
	var e *TooLargeError
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// Headers of a record message. Every record carries the conversation's
// status and times as they are after it, so that the last record of each
// conversation lists it (store.list) without folding its log; a record
// written in parts carries Toolgate-Part on each.
const (
	hdrStatus  = "Toolgate-Status"
	hdrCreated = "Toolgate-Created"
	hdrAgent   = "Toolgate-Agent"
	// hdrDigest is the conversation's AgentDigest, on the records that
	// finish it, by which a retention sweep tells the config that keeps it
	// without reading its log.
	hdrDigest = "Toolgate-Agent-Digest"
	hdrPart   = "Toolgate-Part" // "i/n"
)

// RecordStatusHeader is the header of every record of a conversation's
// log that holds the conversation's status after the record.
const RecordStatusHeader = hdrStatus

// Keys of the index bucket (bus.BucketIndex): the due entries, and the
// sweeps' cursors (cursorFinished, cursorTombstones).
const dueKeyPrefix = "due."

func dueKey(id string) string { return dueKeyPrefix + id }

// store keeps each conversation as its log of records (conversation.Record) in
// stream TOOLGATE_CONVERSATIONS, one subject per conversation, appended
// under optimistic concurrency: a record is written only if the subject's
// last sequence is the one its change was made from
// (Nats-Expected-Last-Subject-Sequence), which gives each change the
// exactly-once of a compare-and-set. The sequence plays the part of a
// revision. Folded states are kept in a bounded cache, so that a change
// made by this process needs no read before the next one.
type store struct {
	bus *bus.Bus
	// index holds due.<id> while a conversation is not finished, but for
	// the first moments of those this replica created, which fresh holds.
	index *bus.KV
	fresh *freshSet
	// instance is this replica's id, which a first record names.
	instance string
	cache    *stateCache
	clock    func() time.Time
	// onTooLarge is told of a change refused as too large, so that the
	// conversation fails visibly instead of waiting for a write that can
	// never succeed.
	onTooLarge func(ctx context.Context, id string, err *TooLargeError)
	// observer is told of the records this process wrote (the store's
	// share of the cost of a conversation) and of the reads of logs
	// (requests of records); nil tells nobody.
	observer observer
	// life ends when the orchestrator begins to stop; an append whose
	// outcome is unknown is followed up until then (appendLog), and no
	// longer: Stop waits for the loops, and a run's end not known to be
	// stored is left to the next replica's reconcile, as a run cut short.
	// log tells of it and unresolved counts it (observer.appendUnresolved);
	// appendTimeout, when set, is a test's shorter storeOpTimeout.
	life          context.Context
	log           *slog.Logger
	unresolved    func()
	appendTimeout time.Duration
	// restartIndexed, when set, is told that the due entry of a finished
	// conversation was put before the record that restarts it is
	// appended: a test's way into that moment.
	restartIndexed func(id string)
	// scanLimit, when set, is a test's smaller sweepScan.
	scanLimit int
}

func (s *store) wrote(n int) {
	if s.observer != nil {
		s.observer.stateWritten(n)
	}
}

// storeOpTimeout bounds one read or write of the store. The contexts handed
// down can be long (a run's lasts RunTimeout), and a JetStream request
// whose answer is lost, because the server the connection was on died or
// the stream's leader moved, is otherwise waited for until that context
// ends: the run would hang, its lease renewed, for the whole RunTimeout.
// Bounded, the operation fails and the usual retry paths take over (a nak,
// a relaunch after the lease, the reconcile loop).
const storeOpTimeout = 10 * time.Second

// get returns the conversation as stored now, and the sequence of its last
// record: what the cache holds, brought up to date with the records other
// replicas appended since (one direct get when there are none). The state
// is the caller's to change.
func (s *store) get(ctx context.Context, id string) (*conversation.State, uint64, error) {
	c, seq, err := s.refresh(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	return c.Clone(), seq, nil
}

// current is get without the look for newer records when the cache has the
// conversation: for a change, whose append finds out if it is stale.
func (s *store) current(ctx context.Context, id string) (*conversation.State, uint64, error) {
	if c, seq, ok := s.cache.get(id); ok {
		if c.Status == conversation.StatusDeleted {
			return nil, 0, fmt.Errorf("conversation %s: %w", id, errDeleted)
		}
		return c.Clone(), seq, nil
	}
	return s.get(ctx, id)
}

// peek is current for a reader that only looks, such as reconcile's pass
// over every conversation not finished: the cached state, not copied (not
// to be changed), and not counted as used; one not cached is read and not
// cached. With 100,000 paused and a cache that held most of them, each
// pass copied every state, and read the rest into the cache, evicting as
// many others, which the next pass read again.
func (s *store) peek(ctx context.Context, id string) (*conversation.State, error) {
	if c, _, ok := s.cache.peek(id); ok {
		if c.Status == conversation.StatusDeleted {
			return nil, fmt.Errorf("conversation %s: %w", id, errDeleted)
		}
		return c, nil
	}
	c, _, err := s.load(ctx, id, false)
	return c, err
}

// refresh brings the cached state of id up to date, loading it whole on a
// miss, and returns it (the cache's: not to be changed).
func (s *store) refresh(ctx context.Context, id string) (*conversation.State, uint64, error) {
	return s.load(ctx, id, true)
}

// load is id's state brought up to date from its cached state (or from
// nothing) with the records after it. keep caches the result and counts
// the state as used; without it the cache is left as it was, and the
// state returned is the caller's.
func (s *store) load(ctx context.Context, id string, keep bool) (*conversation.State, uint64, error) {
	if err := wire.ValidateToken("conversation id", id); err != nil {
		return nil, 0, fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	}
	lookup := s.cache.get
	if !keep {
		lookup = s.cache.peek
	}
	c, seq, ok := lookup(id)
	size := int64(0)
	if ok {
		c = c.Clone()
		size = s.cache.size(id)
	} else {
		c = &conversation.State{}
	}
	n, last, err := s.fold(ctx, id, c, seq)
	if err != nil {
		return nil, 0, err
	}
	if last == 0 {
		return nil, 0, fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	}
	if keep && last != seq {
		s.cache.put(id, c, last, size+n)
	}
	if c.Status == conversation.StatusDeleted {
		return nil, 0, fmt.Errorf("conversation %s: %w", id, errDeleted)
	}
	return c, last, nil
}

// fold applies to c the records of id after sequence after, and returns
// their size and the last sequence (after when there are none; 0 when the
// log is empty).
func (s *store) fold(ctx context.Context, id string, c *conversation.State, after uint64) (int64, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	if s.observer != nil {
		s.observer.stateRead()
	}
	var size int64
	last, err := s.bus.ReadLog(ctx, bus.StreamConversations, bus.ConversationSubject(id), after, func(m bus.LogMsg) error {
		size += int64(len(m.Data))
		var r conversation.Record
		if err := msgpack.Unmarshal(m.Data, &r); err != nil {
			return &CorruptError{ConversationID: id, Sequence: m.Sequence, Err: err}
		}
		if err := c.Fold(&r); err != nil {
			return &CorruptError{ConversationID: id, Sequence: m.Sequence, Err: err}
		}
		return nil
	})
	var corrupt *CorruptError
	if errors.As(err, &corrupt) {
		return 0, 0, corrupt
	}
	var unreadable *bus.LogUnreadableError
	if errors.As(err, &unreadable) {
		if c.Status == conversation.StatusDeleted {
			// Deleted as corrupt (DeleteCorrupt): the damaged message
			// cannot be loaded, so not purged either, and is still
			// counted; the tombstone says all there is to say.
			return size, last, nil
		}
		return 0, 0, &CorruptError{ConversationID: id, Err: unreadable}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("conversation %s: %w", id, err)
	}
	return size, last, nil
}

// create stores a new conversation, its first record written only if its
// log is empty (errExists otherwise). Its due entry is put later, if it
// lasts (fresh.go).
func (s *store) create(ctx context.Context, c *conversation.State) (uint64, error) {
	added := s.fresh.add(c.ID, s.clock())
	seq, n, err := s.appendAs(ctx, c, 0, conversation.FullRecord(c), s.instance)
	if err != nil {
		if conflict(err) {
			if added {
				s.fresh.remove(c.ID)
			}
			return 0, fmt.Errorf("create conversation %s: %w", c.ID, errExists)
		}
		// Left in the fresh set: the record may have been stored all the
		// same, which indexFresh finds out.
		return 0, err
	}
	s.fresh.stored(c.ID, seq)
	if c.Status.Terminal() {
		// Stored with its first run's end (tentative.go).
		s.fresh.remove(c.ID)
	}
	s.cache.put(c.ID, c.Clone(), seq, int64(n))
	return seq, nil
}

// markDue puts the due entry of a conversation that is not finished, and
// returns its revision.
func (s *store) markDue(ctx context.Context, id string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	return s.index.Put(ctx, dueKey(id), nil)
}

// reindex puts the due entry of a conversation once more after the record
// that restarted it is stored. The entry put before that record may be
// gone: a reconcile pass that listed it and read the log before the record
// came took the conversation for finished and purged the entry up to the
// revision it listed, which is that put's. The pass cannot tell it apart
// from the entry of the finished conversation, and nothing else would
// index it again: a replica that then died would leave the run unseen by
// every reconcile (TestRestartIndexedThoughAPassPurgedItsEntry). A put
// after the record is listed by a pass only after the record is stored, so
// no pass removes it while the conversation runs. It fails only when the
// index cannot be written, which is logged: the earlier put most likely
// stands.
func (s *store) reindex(ctx context.Context, id string) {
	if _, err := s.markDue(ctx, id); err != nil && s.log != nil {
		s.log.WarnContext(ctx, "index a restarted conversation again", slog.String("conversation_id", id), slog.String("error", err.Error()))
	}
}

// indexNow puts the due entry of id at once, whoever created it: for a
// conversation that waits for a person, whose pending calls every
// replica's list must show.
func (s *store) indexNow(ctx context.Context, id string) error {
	if _, err := s.markDue(ctx, id); err != nil {
		return err
	}
	s.fresh.remove(id)
	return nil
}

// update applies fn to the stored conversation and appends what it
// changed, if the log has not moved meanwhile; on a conflict it catches up
// and applies fn again, so fn must be a pure function of the state it is
// given. fn returning conversation.ErrUnchanged ends without a write (update returns the
// state and nil); any other error ends it with that error.
//
// A change that would make a record too large fails the conversation
// (onTooLarge) and returns the *TooLargeError.
func (s *store) update(ctx context.Context, id string, fn func(*conversation.State) error) (*conversation.State, error) {
	c, _, err := s.updateFrom(ctx, id, nil, 0, fn)
	if e := tooLarge(err); e != nil && s.onTooLarge != nil {
		s.onTooLarge(ctx, id, e)
	}
	return c, err
}

// updateFrom is update starting from a state the caller read (or wrote) at
// sequence seq, which saves the read when nothing changed since; c is the
// caller's to give away. A nil c starts from the cached state. It also
// returns the sequence of the state it returns.
func (s *store) updateFrom(ctx context.Context, id string, c *conversation.State, seq uint64, fn func(*conversation.State) error) (*conversation.State, uint64, error) {
	for range maxCASAttempts {
		if c == nil {
			var err error
			if c, seq, err = s.current(ctx, id); err != nil {
				return nil, 0, err
			}
		}
		fp := conversation.FingerprintOf(c)
		wasFinished := c.Status.Terminal()
		if err := fn(c); err != nil {
			if errors.Is(err, conversation.ErrUnchanged) {
				return c, seq, nil
			}
			return c, seq, err
		}
		r := conversation.Diff(fp, c)
		if r.Empty() {
			return c, seq, nil
		}
		// A delete leaves a finished conversation no more under way:
		// deleted is not a restart.
		restart := wasFinished && !c.Status.Ended()
		if restart {
			// Indexed before it can need reconciling; a finished
			// conversation keeps its entry until reconcile removes it.
			if _, err := s.markDue(ctx, id); err != nil {
				return nil, 0, fmt.Errorf("update conversation %s: index: %w", id, err)
			}
			if s.restartIndexed != nil {
				s.restartIndexed(id)
			}
		}
		nseq, n, err := s.append(ctx, c, seq, r)
		if err == nil {
			s.cache.put(id, c.Clone(), nseq, s.cache.size(id)+int64(n))
			if !wasFinished && c.Status.Terminal() {
				s.fresh.remove(id)
			}
			if restart {
				// The record is stored: its index entry is owed whatever
				// becomes of the request that made it.
				s.reindex(context.WithoutCancel(ctx), id)
			}
			return c, nseq, nil
		}
		if !conflict(err) {
			return nil, 0, err
		}
		if ctx.Err() != nil {
			return nil, 0, ctx.Err()
		}
		// Another change came first: catch up and try again.
		_, last, err := s.refresh(ctx, id)
		if err == nil && last == seq {
			// Nothing came after the state the change was made on, yet
			// the log moved: it was purged (deleted, and its tombstone
			// removed since). Read it afresh.
			s.cache.drop(id)
			_, _, err = s.refresh(ctx, id)
		}
		if err != nil {
			return nil, 0, err
		}
		c = nil
	}
	return nil, 0, fmt.Errorf("update conversation %s: still conflicting after %d attempts", id, maxCASAttempts)
}

// commit appends what turned the state base fingerprints (the stored
// state at seq) into c, only if the log is still at seq: no catch-up and
// no retry, for a change made ahead of its record (tentative.go). A copy
// of c is cached on success.
func (s *store) commit(ctx context.Context, c *conversation.State, base *conversation.Fingerprint, seq uint64) (uint64, error) {
	nseq, n, err := s.append(ctx, c, seq, conversation.Diff(base, c))
	if err != nil {
		return 0, err
	}
	s.cache.put(c.ID, c.Clone(), nseq, s.cache.size(c.ID)+int64(n))
	if c.Status.Terminal() {
		s.fresh.remove(c.ID)
	}
	return nseq, nil
}

// conflict reports whether err is a refused expected last sequence of a
// log.
func conflict(err error) bool { return errors.Is(err, bus.ErrLogConflict) }

// append writes record r of conversation c (as it is after r) if the last
// record of its log is at expect (0: the log is empty), and returns the new
// last sequence and the record's size. A refused expected sequence is
// bus.ErrLogConflict.
func (s *store) append(ctx context.Context, c *conversation.State, expect uint64, r *conversation.Record) (uint64, int, error) {
	return s.appendAs(ctx, c, expect, r, "")
}

// appendAs is append naming in the record's headers the replica that
// created the conversation (hdrOrigin), when origin is not empty.
func (s *store) appendAs(ctx context.Context, c *conversation.State, expect uint64, r *conversation.Record, origin string) (_ uint64, _ int, err error) {
	buf := recordBuffers.Get().(*[]byte)
	b, err := r.AppendEncode((*buf)[:0])
	defer func() {
		// An append whose outcome is unknown keeps its bytes, to be sent
		// again (bus.ResumeAppend); any other has no more use for them.
		if unknown := (*bus.LogOutcomeError)(nil); !errors.As(err, &unknown) && cap(b) <= maxPooledRecord {
			*buf = b
			recordBuffers.Put(buf)
		}
	}()
	if err != nil {
		return 0, 0, fmt.Errorf("encode record of conversation %s: %w", c.ID, err)
	}
	h := nats.Header{}
	h.Set(hdrStatus, string(c.Status))
	h.Set(hdrCreated, c.CreatedAt.UTC().Format(time.RFC3339Nano))
	if c.Agent != "" {
		h.Set(hdrAgent, c.Agent)
	}
	if c.AgentDigest != "" && c.Status.Terminal() {
		// Read by the retention sweep from finished conversations only;
		// the records of those under way do without its bytes.
		h.Set(hdrDigest, c.AgentDigest)
	}
	if origin != "" {
		h.Set(hdrOrigin, origin)
	}
	seq, err := s.appendLog(ctx, c.ID, expect, b, h)
	s.wrote(len(b))
	var tl *bus.LogTooLargeError
	if errors.As(err, &tl) {
		return 0, 0, &TooLargeError{ConversationID: c.ID, Bytes: tl.Bytes, Limit: tl.Limit}
	}
	if err != nil {
		return 0, 0, fmt.Errorf("append to conversation %s: %w", c.ID, err)
	}
	s.fresh.saw(seq)
	return seq, len(b), nil
}

// recordBuffers hold encoded records while they are appended: the record
// of every change was a copy of the encoder's bytes, garbage once stored.
var recordBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledRecord bounds the buffers kept: one large record (a history
// of megabytes) must not keep its size in the pool.
const maxPooledRecord = 64 << 10

// appendLog appends b to conversation id's log within the store's
// timeout, and follows up an append whose outcome is still unknown then
// until the log says what became of it, its caller's context is cancelled
// (not merely past its deadline) or the orchestrator begins to stop: its
// caller acts on what it stored (an event, a run's launch, OnRunEnd), and
// a record stored whose append returned an error would leave that undone
// for good, since the passes that come later find the record and take it
// as done. Each round without an answer is logged and counted
// (Stats.AppendsUnresolved, toolgate_append_outcome_unknown_total).
func (s *store) appendLog(ctx context.Context, id string, expect uint64, b []byte, h nats.Header) (uint64, error) {
	since := time.Now()
	actx, cancel := context.WithTimeout(ctx, s.opTimeout())
	seq, err := s.bus.AppendLog(actx, bus.StreamConversations, bus.ConversationSubject(id), expect, b, h)
	cancel()
	var unknown *bus.LogOutcomeError
	if !errors.As(err, &unknown) || s.life == nil || answeringRequest(ctx) {
		return seq, err
	}
	return s.followUp(ctx, id, since, unknown)
}

// followUp is appendLog's follow-up of the append unknown left, which was
// sent at since.
func (s *store) followUp(ctx context.Context, id string, since time.Time, unknown *bus.LogOutcomeError) (uint64, error) {
	var (
		seq uint64
		err error = unknown
	)
	// What the caller's context carries (its trace), and its cancellation
	// (a loop's at Stop), but not its deadline.
	rctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	defer context.AfterFunc(s.life, stop)()
	defer context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			stop()
		}
	})()
	for errors.As(err, &unknown) && rctx.Err() == nil {
		if s.unresolved != nil {
			s.unresolved()
		}
		if s.log != nil {
			s.log.WarnContext(ctx, "append to a conversation's log: no answer yet, and whether it was stored is unknown; still asking",
				slog.String("conversation_id", id), slog.Duration("for", time.Since(since)), slog.String("error", unknown.Err.Error()))
		}
		actx, cancel := context.WithTimeout(rctx, s.opTimeout())
		seq, err = s.bus.ResumeAppend(actx, unknown)
		cancel()
	}
	return seq, err
}

// answersRequest marks ctx as a client's request's, which waits for the
// answer (a start, a cancel, a delete): an append of it whose outcome is
// still unknown at the store's timeout fails the request, as before,
// rather than hold it for as long as the outage lasts. The client's retry
// finds what was stored; what must follow a stored one is the caller's to
// follow up (followUpRequest).
func answersRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, requestKey{}, true)
}

type requestKey struct{}

func answeringRequest(ctx context.Context) bool { return ctx.Value(requestKey{}) != nil }

// followUpRequest follows up, off the request's way, the append whose
// outcome err (a request's, which failed at the store's timeout) left
// unknown, and calls stored if the log then says it was stored, once;
// errors of another kind are left alone. spawn runs the follow-up on a
// goroutine Stop waits for. An append of the request's retry and this one
// expect the same sequence, so at most one of them is stored, and what
// follows it is done once: by the retry, or here.
func (s *store) followUpRequest(ctx context.Context, id string, spawn func(func()), err error, stored func()) {
	var unknown *bus.LogOutcomeError
	if s.life == nil || !errors.As(err, &unknown) {
		return
	}
	ctx = context.WithoutCancel(ctx)
	spawn(func() {
		if _, err := s.followUp(ctx, id, time.Now(), unknown); err == nil {
			stored()
		}
	})
}

// opTimeout is storeOpTimeout, or the shorter one a test gave.
func (s *store) opTimeout() time.Duration {
	if s.appendTimeout > 0 {
		return s.appendTimeout
	}
	return storeOpTimeout
}

// conversationOf returns the conversation a run belongs to, which its id
// names.
func (s *store) conversationOf(_ context.Context, runID string) (string, error) {
	if conv := convOfRunID(runID); conv != "" {
		return conv, nil
	}
	return "", fmt.Errorf("run %s: %w", runID, ErrNotFound)
}

// dueEntry is a conversation of the index, with the revision of its
// entry, or one of this replica's fresh set (fresh.go), which has none.
type dueEntry struct {
	id    string
	rev   uint64
	fresh bool
}

// due lists the conversations not finished that reconcile and the pending
// list go over, however many finished ones are stored: those indexed, and
// those this replica created and has not indexed yet.
func (s *store) due(ctx context.Context) ([]dueEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	entries, err := s.index.List(ctx, dueKeyPrefix+">", false)
	if err != nil {
		return nil, fmt.Errorf("list due conversations: %w", err)
	}
	out := make([]dueEntry, len(entries))
	listed := make(map[string]bool, len(entries))
	for i, e := range entries {
		out[i] = dueEntry{id: strings.TrimPrefix(e.Key, dueKeyPrefix), rev: e.Revision}
		listed[out[i].id] = true
	}
	for id := range s.fresh.addedBefore(time.Time{}) {
		if !listed[id] {
			out = append(out, dueEntry{id: id, fresh: true})
		}
	}
	return out, nil
}

// undueInFlight bounds the removals of due entries in flight at once:
// one after another, the first pass after 100,000 conversations finished
// took 39 s, a round trip each.
const undueInFlight = 32

// undue removes the due entry of a finished (or deleted) conversation,
// unless it was put again since it was listed at rev. It purges rather
// than deletes: a delete leaves a marker, a stored message per
// conversation that the bucket keeps until it is purged in turn. A fresh
// conversation has no entry: it leaves the fresh set (called for one
// known finished; one not found may be one whose first record is still
// on its way, which only indexFresh tells from one that is gone).
func (s *store) undue(ctx context.Context, e dueEntry) error {
	if e.fresh {
		s.fresh.remove(e.id)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeOpTimeout)
	defer cancel()
	return s.index.PurgeUpTo(ctx, dueKey(e.id), e.rev)
}

// watch signals on the returned channel each time a record is appended to
// id's log after sequence after, until ctx ends.
func (s *store) watch(ctx context.Context, id string, after uint64) (<-chan struct{}, error) {
	ch, err := s.bus.WatchLog(ctx, bus.StreamConversations, bus.ConversationSubject(id), after)
	if err != nil {
		return nil, fmt.Errorf("watch conversation %s: %w", id, err)
	}
	return ch, nil
}

// ReadConversation reads conversation id from its log, without an
// orchestrator: what tools and tests that look at the store directly use.
func ReadConversation(ctx context.Context, b *bus.Bus, id string) (*conversation.State, error) {
	s := &store{bus: b, fresh: newFreshSet(), cache: newStateCache(0)}
	c, _, err := s.get(ctx, id)
	return c, err
}

// runIndex is the value of key run.<run_id>: the conversation it belongs to.
type runIndex struct {
	ConversationID string `msgpack:"conversation_id"`
}
