package conversation

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/toolgate/toolgate/internal/agent"
)

// A conversation is stored as a log, the messages of its own subject of
// stream TOOLGATE_CONVERSATIONS: each change appends a record of what it
// changed, never the whole state, so that what a change writes does not
// grow with the conversation. Folding the records in order gives the state
// back (State.apply).
//
// The parts that grow with a conversation are kept as appends: the history
// (messages after the last known length), the runs (a run changes only
// while it has not ended), the decisions. The rest is small and written
// whole when it changed: the conversation's head (status, output, lease,
// counters, times), the batch's head, and each changed call of the batch.
// What changed is found by comparing encodings taken before and after the
// transition (FingerprintOf, diff), so a field added to any of these
// structs is stored without more code; a run record, which is never
// changed in place once in a list (a change puts a copy in its place:
// changeRun), is compared by identity instead.

// Record is one entry of a conversation's log.
type Record struct {
	// Head is the conversation without its history, runs, decisions and
	// batch, when any of it changed.
	Head *State `msgpack:"head,omitempty"`
	// History, when set, cuts the history at At and appends Messages.
	History *HistoryChange `msgpack:"history,omitempty"`
	// Runs are run records added or changed, matched by run id.
	Runs []*RunRecord `msgpack:"runs,omitempty"`
	// Decisions are appended to the conversation's.
	Decisions []DecisionRecord `msgpack:"decisions,omitempty"`
	// BatchNil drops the batch.
	BatchNil bool `msgpack:"batch_nil,omitempty"`
	// Batch is the batch's head (without calls) when it changed; BatchNew
	// says it is a new batch, whose calls all follow in Calls.
	Batch    *Batch `msgpack:"batch,omitempty"`
	BatchNew bool   `msgpack:"batch_new,omitempty"`
	// Calls are the batch's calls that are new or changed, by index.
	Calls []CallChange `msgpack:"calls,omitempty"`
	// Published are the batch's calls whose only change is that they were
	// marked published: reconcile's mark of a paused batch stored the whole
	// call again (its args and digests, and the head for the time of the
	// change), 761 B for a batch-1 call, 43 % of what a conversation that
	// waited past a pass had stored.
	Published []CallMark `msgpack:"published,omitempty"`
}

// CallMark is a call, by its index in the batch, marked published at At.
type CallMark struct {
	Index int       `msgpack:"i"`
	At    time.Time `msgpack:"at"`
}

// HistoryChange cuts the history at At and appends Messages.
type HistoryChange struct {
	At       int             `msgpack:"at"`
	Messages []agent.Message `msgpack:"messages"`
}

// CallChange is a call of the batch, by index, new or changed.
type CallChange struct {
	Index int          `msgpack:"i"`
	Call  *PendingCall `msgpack:"call"`
}

// Encode is r's encoding, as msgpack.Marshal gives it.
func (r *Record) Encode() ([]byte, error) { return recordEncoders.encode(r) }

// AppendEncode appends r's encoding (Encode's) to dst, for a writer that
// uses its buffers again.
func (r *Record) AppendEncode(dst []byte) ([]byte, error) {
	e := recordEncoders.get()
	defer recordEncoders.put(e)
	if err := e.enc.Encode(r); err != nil {
		return dst, err
	}
	return append(dst, e.buf.Bytes()...), nil
}

// Empty reports whether the record changes nothing.
func (r *Record) Empty() bool {
	return r.Head == nil && r.History == nil && len(r.Runs) == 0 && len(r.Decisions) == 0 &&
		!r.BatchNil && r.Batch == nil && len(r.Calls) == 0 && len(r.Published) == 0
}

// FullRecord is the record that creates c from nothing: a conversation's
// first record.
func FullRecord(c *State) *Record {
	return Diff(&Fingerprint{histLen: 0}, c)
}

// Fingerprint is what Diff compares a changed conversation with: the
// encodings of the parts that may change in place, the records of the
// runs that may still change, and the lengths of the parts that only
// grow. The encodings are kept one after another in one array.
type Fingerprint struct {
	enc      []byte
	head     span // none: compared with nothing, the head is written
	histLen  int
	histLast span
	runsLen  int
	// openRuns are the runs that had not ended, with their index: a run
	// that ended never changes again.
	openRuns []openRun
	decLen   int
	batch    *Batch
	bhead    span
	calls    []span
}

// span is where an encoding is in fingerprint.enc; the zero span is none.
type span struct{ from, to int }

func (fp *Fingerprint) add(v any) span {
	from := len(fp.enc)
	fp.enc = sortedEncoders.appendTo(fp.enc, v)
	return span{from, len(fp.enc)}
}

// encodes reports whether v encodes as what s spans.
func (fp *Fingerprint) encodes(s span, v any) bool {
	return s != (span{}) && sortedEncoders.encodes(v, fp.enc[s.from:s.to])
}

// onlyMarked reports whether pc, marked published and not answered, was
// what s spans before the mark (with or without its time).
func (fp *Fingerprint) onlyMarked(s span, pc *PendingCall) bool {
	if !pc.Published || pc.Reply != nil {
		return false
	}
	was := *pc
	was.Published = false
	if fp.encodes(s, &was) {
		return true
	}
	was.PublishedAt = time.Time{}
	return fp.encodes(s, &was)
}

type openRun struct {
	index int
	rec   *RunRecord
}

// FingerprintOf takes c's fingerprint before a transition.
func FingerprintOf(c *State) *Fingerprint {
	fp := &Fingerprint{
		enc:     make([]byte, 0, 1024),
		histLen: len(c.History),
		runsLen: len(c.Runs),
		decLen:  len(c.Decisions),
		batch:   c.Batch,
	}
	fp.head = fp.add(headOf(c))
	if n := len(c.History); n > 0 {
		fp.histLast = fp.add(&c.History[n-1])
	}
	for i, rec := range c.Runs {
		if rec.EndedAt.IsZero() {
			fp.openRuns = append(fp.openRuns, openRun{i, rec})
		}
	}
	if c.Batch != nil {
		fp.bhead = fp.add(batchHeadOf(c.Batch))
		fp.calls = make([]span, len(c.Batch.Calls))
		for i, pc := range c.Batch.Calls {
			fp.calls[i] = fp.add(pc)
		}
	}
	return fp
}

// Diff is the record that turns the state fp was taken of into c.
func Diff(fp *Fingerprint, c *State) *Record {
	r := &Record{}
	if h := headOf(c); !fp.encodes(fp.head, h) {
		r.Head = h
	}
	// The history grows by appends; a history that is shorter, or whose
	// last known message changed, is written again whole.
	n := len(c.History)
	switch {
	case n >= fp.histLen && (fp.histLen == 0 || fp.encodes(fp.histLast, &c.History[fp.histLen-1])):
		if n > fp.histLen {
			r.History = &HistoryChange{At: fp.histLen, Messages: c.History[fp.histLen:]}
		}
	default:
		r.History = &HistoryChange{At: 0, Messages: c.History}
	}
	for _, o := range fp.openRuns {
		if o.index < len(c.Runs) && c.Runs[o.index] != o.rec {
			r.Runs = append(r.Runs, c.Runs[o.index])
		}
	}
	if len(c.Runs) > fp.runsLen {
		r.Runs = append(r.Runs, c.Runs[fp.runsLen:]...)
	}
	if len(c.Decisions) > fp.decLen {
		r.Decisions = c.Decisions[fp.decLen:]
	}
	switch b := c.Batch; {
	case b == nil:
		r.BatchNil = fp.batch != nil
	case b != fp.batch || len(b.Calls) < len(fp.calls):
		r.Batch, r.BatchNew = batchHeadOf(b), true
		for i, pc := range b.Calls {
			r.Calls = append(r.Calls, CallChange{Index: i, Call: pc})
		}
	default:
		if h := batchHeadOf(b); !fp.encodes(fp.bhead, h) {
			r.Batch = h
		}
		for i, pc := range b.Calls {
			switch {
			case i < len(fp.calls) && fp.encodes(fp.calls[i], pc):
			case i < len(fp.calls) && fp.onlyMarked(fp.calls[i], pc):
				r.Published = append(r.Published, CallMark{Index: i, At: pc.PublishedAt})
			default:
				r.Calls = append(r.Calls, CallChange{Index: i, Call: pc})
			}
		}
	}
	return r
}

// Fold folds record r into c.
func (c *State) Fold(r *Record) error {
	if r.Head != nil {
		h := *r.Head
		h.History, h.Runs, h.Decisions, h.Batch = c.History, c.Runs, c.Decisions, c.Batch
		h.runsOwned, h.historyRoom = c.runsOwned, c.historyRoom
		*c = h
	}
	if h := r.History; h != nil {
		if h.At > len(c.History) {
			return fmt.Errorf("record appends history at %d, but the conversation has %d messages", h.At, len(c.History))
		}
		// Clipped, so that a copy of the state sharing the array keeps
		// its own messages.
		c.History = append(slices.Clip(c.History[:h.At]), h.Messages...)
		c.historyRoom = nil
	}
	if len(r.Runs) > 0 {
		c.ownRuns(len(r.Runs))
	}
	for _, rr := range r.Runs {
		// A copy: the record's runs may be folded into other states too.
		cp := *rr
		if i := c.runIndexOf(rr.RunID); i >= 0 {
			c.Runs[i] = &cp
		} else {
			c.Runs = append(c.Runs, &cp)
		}
	}
	if len(r.Decisions) > 0 {
		c.Decisions = append(slices.Clip(c.Decisions), r.Decisions...)
	}
	if r.BatchNil {
		c.Batch = nil
	}
	if r.Batch != nil {
		b := *r.Batch
		b.Calls = nil
		if !r.BatchNew && c.Batch != nil {
			b.Calls = c.Batch.Calls
		}
		c.Batch = &b
	}
	for _, ch := range r.Calls {
		if c.Batch == nil {
			return fmt.Errorf("record changes call %d of a conversation without a batch", ch.Index)
		}
		if ch.Index < 0 || ch.Index > len(c.Batch.Calls) {
			return fmt.Errorf("record changes call %d of a batch of %d", ch.Index, len(c.Batch.Calls))
		}
		if ch.Index == len(c.Batch.Calls) {
			c.Batch.Calls = append(c.Batch.Calls, ch.Call)
		} else {
			c.Batch.Calls[ch.Index] = ch.Call
		}
	}
	for _, m := range r.Published {
		if c.Batch == nil || m.Index < 0 || m.Index >= len(c.Batch.Calls) {
			return fmt.Errorf("record marks call %d published, which the conversation does not have", m.Index)
		}
		// A copy: the call may be another state's too.
		pc := *c.Batch.Calls[m.Index]
		pc.Published, pc.PublishedAt = true, m.At
		c.Batch.Calls[m.Index] = &pc
	}
	return nil
}

// headOf is c without its history, runs, decisions and batch.
func headOf(c *State) *State {
	h := *c
	h.History, h.Runs, h.Decisions, h.Batch = nil, nil, nil, nil
	h.runsOwned, h.historyRoom = false, nil
	return &h
}

// batchHeadOf is b without its calls.
func batchHeadOf(b *Batch) *Batch {
	h := *b
	h.Calls = nil
	return &h
}

// Clone is a copy of c that can be changed without changing c: what
// transitions change in place (the head, the lease, open runs, the batch
// and its calls) is copied; the history and decisions, which only grow by
// appends to a clipped slice (or, for the history, by the one run that
// takes historyRoom), and the replies, which are replaced rather than
// changed, are shared.
func (c *State) Clone() *State {
	n := *c
	if c.historyRoom == nil {
		n.History = slices.Clip(c.History)
	}
	n.Decisions = slices.Clip(c.Decisions)
	// Neither changes the shared runs in place from now on (ownRuns). Only
	// a state that changed its runs has the flag set, never one in the
	// cache (stateCache.put), which readers clone at once.
	if c.runsOwned {
		c.runsOwned = false
	}
	n.Runs, n.runsOwned = slices.Clip(c.Runs), false
	if c.Lease != nil {
		l := *c.Lease
		n.Lease = &l
	}
	if c.Batch != nil {
		b := *c.Batch
		b.Calls = make([]*PendingCall, len(c.Batch.Calls))
		for i, pc := range c.Batch.Calls {
			p := *pc
			b.Calls[i] = &p
		}
		n.Batch = &b
	}
	return &n
}

// encoderPool keeps msgpack encoders with their buffers for reuse: an
// encoder writing into a fresh buffer grows it by doubling, and that
// garbage (the fingerprints and records of every change) was a large share
// of what the orchestrator allocated. An encoding is copied out at its
// exact size.
type encoderPool struct{ pool sync.Pool }

type pooledEncoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

func newEncoderPool(sorted bool) *encoderPool {
	p := &encoderPool{}
	p.pool.New = func() any {
		e := &pooledEncoder{}
		e.enc = msgpack.NewEncoder(&e.buf)
		e.enc.SetSortMapKeys(sorted)
		return e
	}
	return p
}

// sortedEncoders encode with map keys sorted (fingerprints); recordEncoders
// as msgpack.Marshal does (records).
var (
	sortedEncoders = newEncoderPool(true)
	recordEncoders = newEncoderPool(false)
)

func (p *encoderPool) encode(v any) ([]byte, error) {
	e := p.get()
	defer p.put(e)
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(e.buf.Bytes()), nil
}

// appendTo appends v's encoding to dst. Every stored type encodes; should
// one fail, a programming error, its message stands for it: an encoding
// that compares unequal only costs a larger record.
func (p *encoderPool) appendTo(dst []byte, v any) []byte {
	e := p.get()
	defer p.put(e)
	if err := e.enc.Encode(v); err != nil {
		return append(dst, err.Error()...)
	}
	return append(dst, e.buf.Bytes()...)
}

// encodes reports whether v's encoding is want, without keeping it.
func (p *encoderPool) encodes(v any, want []byte) bool {
	e := p.get()
	defer p.put(e)
	return e.enc.Encode(v) == nil && bytes.Equal(e.buf.Bytes(), want)
}

func (p *encoderPool) get() *pooledEncoder { return p.pool.Get().(*pooledEncoder) }

func (p *encoderPool) put(e *pooledEncoder) {
	// A buffer grown by one large state is let go.
	if e.buf.Cap() <= 1<<20 {
		e.buf.Reset()
		p.pool.Put(e)
	}
}
