package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// Metrics of the memory case.
const (
	MetricHeapPerConversation = "heap_bytes_per_conversation"
	// MetricHeapAtPause is the same heap measured as soon as every
	// conversation has paused, with the embedded server's caches of the
	// last writes still held (see CacheSettle).
	MetricHeapAtPause          = "heap_bytes_per_conversation_at_pause"
	MetricStorePerConversation = "store_bytes_per_conversation"
	// MetricOrchestratorHeap is toolgate's share of the heap per paused
	// conversation, by allocation site (toolgateHeap): without the
	// embedded server's caches of its streams.
	MetricOrchestratorHeap = "orchestrator_heap_bytes_per_conversation"
	// MetricResumeSeconds is, for toolgate, the time from publishing one
	// reply per paused conversation until every follow-up has finished;
	// for raw, the time to consume every reply and update its
	// conversation's entry by revision (CAS): the bare JetStream work of a
	// resume, the yardstick.
	MetricResumeSeconds = "resume_seconds"
	// MetricResumeStorageSeconds is the raw side's resume storing what
	// toolgate's stores per conversation: its consume and CAS, and an event
	// message (resumeEventBytes) published through the same pipeline ahead
	// of each CAS; the storage floor of a resume, in the storage column of
	// the resume_seconds row.
	MetricResumeStorageSeconds = "resume_storage_seconds"
	// MetricResumeAllocBytes is the bytes the process allocated per
	// resumed conversation: for toolgate over the resume (the replies'
	// publication included, as in its time), for raw over the replies'
	// publication and its consume and CAS.
	MetricResumeAllocBytes = "resume_alloc_bytes_per_conversation"
	// MetricKVCreateSeconds is the raw side's time to create one KV entry
	// per paused conversation.
	MetricKVCreateSeconds = "kv_create_seconds"
	// MetricReplyPublishSeconds is the raw side's time to publish one
	// reply per paused conversation: JetStream's floor under a resume,
	// the yardstick of earlier results.
	MetricReplyPublishSeconds = "reply_publish_seconds"
	// MetricResumeReads is toolgate's reads of conversation logs per
	// conversation during the resume: the states its cache did not hold.
	MetricResumeReads = "resume_state_reads_per_conversation"
	// MetricResumeWrites is toolgate's appends to conversation logs per
	// conversation during the resume, refused ones (a conflict with
	// another change) included.
	MetricResumeWrites = "resume_state_writes_per_conversation"
)

// Metrics of the reconcile passes timed around the memory case (toolgate
// only): one pass with nothing stored, the one that finds every
// conversation finished (and removes their due entries), and one with
// them all stored; passes are medians of reconcilePasses. Each pass is
// paired with a bare JetStream request timed just before it (the status
// of an empty bucket of the harness's own), and the growth compares the
// passes in units of that request: a pass with nothing due is one such
// request, some fifty microseconds that the machine's load at the moment
// stretched by up to 2.5 times between the two sets (the growth read
// 0.7–2.3 from run to run while every pass made the same one request).
const (
	MetricReconcileNone     = "reconcile_ms_none_stored"
	MetricReconcileFinished = "reconcile_ms_finished_stored"
	// MetricReconcileRequestNone and MetricReconcileRequestFinished are
	// the medians of the bare requests paired with each set.
	MetricReconcileRequestNone     = "reconcile_request_ms_none_stored"
	MetricReconcileRequestFinished = "reconcile_request_ms_finished_stored"
	MetricReconcileGrowth          = "reconcile_finished_over_none"
	MetricReconcileCleanup         = "reconcile_ms_first_after_finish"
	// MetricReconcileCleanupEntries is the due entries that first pass
	// found: those of the conversations that lasted past a tick of the
	// index loop (10 s) before they finished, the others never indexed.
	// How many they are depends on how long the pauses took, so the
	// pass's time is read with it.
	MetricReconcileCleanupEntries = "reconcile_entries_first_after_finish"
	MetricReconcileReads          = "reconcile_state_reads_per_pass"
)

// Metrics of listing the conversations once they are all finished
// (toolgate only), through the orchestrator's list (GET
// /v1/conversations): the median time of the first page of 100 of all
// conversations (medianPasses of them), and the time to go through every
// conversation in pages of the most a page holds, per conversation listed.
// Neither should grow with the conversations stored.
const (
	MetricListPage = "list_first_page_ms"
	MetricListAll  = "list_all_us_per_conversation"
)

// Metrics of the retention sweep (toolgate only), last in the case: the
// median time of a sweep with none of the finished conversations aged
// past the retention (medianPasses of them), which should not grow with
// the conversations stored, and the time of the sweep that deletes all of
// them, per conversation deleted.
const (
	MetricSweepNone = "retention_sweep_ms_none_aged"
	MetricSweepAll  = "retention_sweep_us_per_conversation_deleted"
)

const (
	rawBucket      = "bench_runs"
	pipelineDepth  = 2048
	hdrExpectedSeq = "Nats-Expected-Last-Subject-Sequence"
)

// pausedRecord is shaped like the orchestrator's stored conversation with
// one pending call: a short history, one run, a batch of one call.
type pausedRecord struct {
	ID      string      `msgpack:"id"`
	Status  string      `msgpack:"status"`
	History []pausedMsg `msgpack:"history"`
	Runs    []pausedRun `msgpack:"runs"`
	Batch   pausedBatch `msgpack:"batch"`
	Created time.Time   `msgpack:"created_at"`
	Updated time.Time   `msgpack:"updated_at"`
}

type pausedMsg struct {
	Kind  string          `msgpack:"kind"`
	Parts []pausedPart    `msgpack:"parts"`
	Usage map[string]int  `msgpack:"usage,omitempty"`
	Meta  json.RawMessage `msgpack:"meta,omitempty"`
}

type pausedPart struct {
	Kind       string          `msgpack:"kind"`
	Content    string          `msgpack:"content,omitempty"`
	ToolName   string          `msgpack:"tool_name,omitempty"`
	ToolCallID string          `msgpack:"tool_call_id,omitempty"`
	Args       json.RawMessage `msgpack:"args,omitempty"`
}

type pausedRun struct {
	RunID   string    `msgpack:"run_id"`
	Status  string    `msgpack:"status"`
	Prompt  string    `msgpack:"prompt,omitempty"`
	Started time.Time `msgpack:"started_at"`
}

type pausedBatch struct {
	RunID string             `msgpack:"run_id"`
	Calls []wire.CallRequest `msgpack:"calls"`
	Reply *wire.CallReply    `msgpack:"reply,omitempty"`
}

func newPausedRecord(conversation, run, call string) pausedRecord {
	const prompt = "Add the release notes task to my todo list."
	req := sampleCallRequest(run, conversation, call)
	return pausedRecord{
		ID:     conversation,
		Status: "paused",
		History: []pausedMsg{
			{Kind: "request", Parts: []pausedPart{
				{Kind: "system-prompt", Content: "You manage the user's notes. Use the tools to change files."},
				{Kind: "user-prompt", Content: prompt},
			}},
			{Kind: "response", Parts: []pausedPart{
				{Kind: "tool-call", ToolName: req.ToolName, ToolCallID: call, Args: req.Args},
			}, Usage: map[string]int{"input_tokens": 412, "output_tokens": 58, "requests": 1}},
		},
		Runs:    []pausedRun{{RunID: run, Status: "paused", Prompt: prompt, Started: sampleDeadline}},
		Batch:   pausedBatch{RunID: run, Calls: []wire.CallRequest{req}},
		Created: sampleDeadline,
		Updated: sampleDeadline,
	}
}

// RawMemoryTarget is the memory case's JetStream baseline: one KV entry
// per paused conversation (the store toolgate keeps them in) and its call
// queued for a worker, one reply each, and the bare work of applying the
// replies. Its heap figure is what the embedded server (in the same
// process) and the client hold for that: the part of toolgate's heap
// figure that is not the orchestrator's.
type RawMemoryTarget struct {
	env *Env
	seq atomic.Int64
}

// NewRawMemoryTarget returns the memory baseline on env.
func NewRawMemoryTarget(env *Env) *RawMemoryTarget { return &RawMemoryTarget{env: env} }

// Name is "raw".
func (t *RawMemoryTarget) Name() string { return "raw" }

// RunMemory creates c.Conversations entries, publishes a reply for each
// (MetricReplyPublishSeconds), then consumes the replies and updates every
// entry by revision (MetricResumeSeconds, the yardstick of toolgate's
// resume). The bucket and stream are deleted afterwards.
func (t *RawMemoryTarget) RunMemory(ctx context.Context, c MemoryCase) (mm MemoryMeasurement, err error) {
	n := c.Conversations
	if n < 1 {
		return mm, errors.New("raw memory: conversations must be at least 1")
	}
	prefix := "k" + strconv.FormatInt(t.seq.Add(1), 10)
	orch, err := t.env.Connect(ctx, "bench-orchestrator")
	if err != nil {
		return mm, err
	}
	defer orch.Close()
	js := orch.JetStream()
	kv, cleanup, err := rawMemoryStore(ctx, js, prefix)
	if err != nil {
		return mm, err
	}
	defer func() {
		if cerr := cleanup(); cerr != nil && err == nil {
			err = fmt.Errorf("raw memory: clean up: %w", cerr)
		}
	}()

	// Hold: create every entry, as a run that pauses does, and queue its
	// call for a worker (none runs); in two halves, the heap measured after
	// each (heapSlope).
	kvSubject := "$KV." + rawBucket + "_" + prefix + ".conv."
	revisions := make([]uint64, n)
	var createSeconds float64
	hold := func(from, to int) error {
		start := time.Now()
		err := publishAll(ctx, js, to-from, "create entry", func(i int, ack *jetstream.PubAck) { revisions[from+i] = ack.Sequence },
			func(i int) (*nats.Msg, []jetstream.PublishOpt, error) {
				conv := conversationID(prefix, from+i)
				run := runID(prefix, int64(from+i))
				data, err := msgpack.Marshal(newPausedRecord(conv, run, toolCallID(run, 0)))
				msg := &nats.Msg{Subject: kvSubject + conv, Data: data, Header: nats.Header{}}
				msg.Header.Set(hdrExpectedSeq, "0")
				return msg, nil, err
			})
		if err != nil {
			return err
		}
		createSeconds += time.Since(start).Seconds()
		call := rawCallOf(prefix)
		return publishAll(ctx, js, to-from, "publish call", nil, func(i int) (*nats.Msg, []jetstream.PublishOpt, error) { return call(from + i) })
	}
	quiet := func(ctx context.Context) error { return settle(ctx, c.Settle) }
	atPause, settled, _, err := heapSlope(ctx, n, hold, quiet, heapAfterGC, nil)
	if err != nil {
		return mm, err
	}

	status, err := kv.Status(ctx)
	if err != nil {
		return mm, fmt.Errorf("raw memory: bucket status: %w", err)
	}
	if status.Values() != uint64(n) {
		return mm, fmt.Errorf("raw memory: bucket holds %d entries, want %d", status.Values(), n)
	}
	storePer := float64(status.Bytes()) / float64(n)

	// The replies arrive: the yardstick is the time to publish them.
	alloc0 := allocated()
	start := time.Now()
	err = publishAll(ctx, js, n, "publish reply", nil, rawReplyOf(prefix))
	if err != nil {
		return mm, err
	}
	publishSeconds := time.Since(start).Seconds()

	resume, err := t.applyReplies(ctx, js, prefix, rawReplyConsumer, n, revisions, nil)
	if err != nil {
		return mm, err
	}
	resumeAlloc := allocatedPer(alloc0, n)

	// The storage floor of a resume: the replies again, now applied with
	// an event message each.
	storage, err := t.resumeStorage(ctx, js, prefix, n, revisions)
	if err != nil {
		return mm, err
	}
	return MemoryMeasurement{
		Conversations: n,
		Figures: map[string]float64{
			MetricHeapPerConversation:  settled,
			MetricHeapAtPause:          atPause,
			MetricStorePerConversation: storePer,
			MetricResumeSeconds:        resume.elapsed.Seconds(),
			MetricResumeAllocBytes:     resumeAlloc,
			MetricResumeStorageSeconds: storage.elapsed.Seconds(),
			MetricKVCreateSeconds:      createSeconds,
			MetricReplyPublishSeconds:  publishSeconds,
		},
		ResumeGap: resume.gap,
	}, nil
}

// rawCallOf is the call of the i-th paused conversation of prefix, queued
// for a worker as the orchestrator queues it.
func rawCallOf(prefix string) func(i int) (*nats.Msg, []jetstream.PublishOpt, error) {
	return func(i int) (*nats.Msg, []jetstream.PublishOpt, error) {
		run := runID(prefix, int64(i))
		data, err := wire.Encode(sampleCallRequest(run, conversationID(prefix, i), toolCallID(run, 0)), wire.ContentTypeMsgpack)
		msg := &nats.Msg{Subject: rawCallPrefix + sampleTool, Data: data, Header: nats.Header{}}
		msg.Header.Set(hdrContentType, wire.ContentTypeMsgpack)
		return msg, []jetstream.PublishOpt{jetstream.WithMsgID(run + "." + toolCallID(run, 0) + ".call")}, err
	}
}

// rawReplyOf is a worker's reply to the i-th paused conversation's call.
func rawReplyOf(prefix string) func(i int) (*nats.Msg, []jetstream.PublishOpt, error) {
	return func(i int) (*nats.Msg, []jetstream.PublishOpt, error) {
		run := runID(prefix, int64(i))
		data, err := wire.Encode(replyFor(sampleCallRequest(run, conversationID(prefix, i), toolCallID(run, 0)), "bench-worker-0"), wire.ContentTypeMsgpack)
		msg := &nats.Msg{Subject: rawReplyPrefix + run + "." + wire.ReplyKindCall, Data: data, Header: nats.Header{}}
		msg.Header.Set(hdrContentType, wire.ContentTypeMsgpack)
		msg.Header.Set(hdrRun, run)
		msg.Header.Set(hdrCall, toolCallID(run, 0))
		msg.Header.Set(hdrConversation, conversationID(prefix, i))
		return msg, []jetstream.PublishOpt{jetstream.WithMsgID(run + "." + toolCallID(run, 0) + ".result")}, err
	}
}

// rawMemoryStore creates the raw case's bucket (configured as the
// conversations' index bucket: one value a key, on file) and its calls
// and replies streams, and returns the bucket and what removes them all.
func rawMemoryStore(ctx context.Context, js jetstream.JetStream, prefix string) (jetstream.KeyValue, func() error, error) {
	var kvCfg jetstream.KeyValueConfig
	for _, kc := range (bus.SetupConfig{}).KeyValueConfigs() {
		if kc.Bucket == bus.BucketIndex {
			kvCfg = kc
		}
	}
	if kvCfg.Bucket == "" {
		return nil, nil, errors.New("raw memory: bus has no index bucket config")
	}
	kvCfg.Bucket = rawBucket + "_" + prefix
	callsCfg, repliesCfg, err := rawStreams(prefix)
	if err != nil {
		return nil, nil, err
	}
	_, eventsCfg, err := storageStreams(prefix)
	if err != nil {
		return nil, nil, err
	}
	var made []func(context.Context) error
	cleanup := func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		var errs []error
		for _, del := range made {
			errs = append(errs, del(ctx))
		}
		return errors.Join(errs...)
	}
	kv, err := js.CreateKeyValue(ctx, kvCfg)
	if err != nil {
		return nil, nil, fmt.Errorf("raw memory: create bucket: %w", err)
	}
	made = append(made, func(ctx context.Context) error { return js.DeleteKeyValue(ctx, kvCfg.Bucket) })
	for _, sc := range []jetstream.StreamConfig{repliesCfg, callsCfg, eventsCfg} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			return nil, nil, errors.Join(fmt.Errorf("raw memory: create stream: %w", err), cleanup())
		}
		made = append(made, func(ctx context.Context) error { return js.DeleteStream(ctx, sc.Name) })
	}
	return kv, cleanup, nil
}

// publishAll publishes msg(i) for every i below n through a pipeline,
// telling acked (when set) of each ack; what names the message in errors.
func publishAll(ctx context.Context, js jetstream.JetStream, n int, what string, acked func(int, *jetstream.PubAck), msg func(i int) (*nats.Msg, []jetstream.PublishOpt, error)) error {
	p := newPipeline(ctx, js, pipelineDepth, acked)
	for i := range n {
		m, opts, err := msg(i)
		if err == nil {
			err = p.publish(ctx, m, i, opts...)
		}
		if err != nil {
			p.wait()
			return fmt.Errorf("raw memory: %s: %w", what, err)
		}
	}
	if err := p.wait(); err != nil {
		return fmt.Errorf("raw memory: %s: %w", what, err)
	}
	return nil
}

// resumeEventBytes is the size of the storage floor's event message per
// resumed conversation, as the events stream counts it: about a follow-up's
// events in toolgate (a reply applied, the run's start, its tool call and
// result, its model response and end, the conversation's completion). The
// round trip's storage floor found an event message's size immaterial
// (docs/architecture.md).
const resumeEventBytes = 3000

// resumeStorage times the storage floor of a resume: a reply published
// again for every conversation (new message ids) and consumed from where
// they start, each applied by CAS as applyReplies does after an event
// message of resumeEventBytes on the events stream's configuration.
func (t *RawMemoryTarget) resumeStorage(ctx context.Context, js jetstream.JetStream, prefix string, n int, revisions []uint64) (resumeRun, error) {
	st, err := js.Stream(ctx, rawRepliesStream+"_"+prefix)
	if err != nil {
		return resumeRun{}, fmt.Errorf("raw memory: replies stream: %w", err)
	}
	// Looked up just now: its info is the stream's state.
	from := st.CachedInfo().State.LastSeq + 1
	reply := rawReplyOf(prefix)
	if err := publishAll(ctx, js, n, "publish reply again", nil, func(i int) (*nats.Msg, []jetstream.PublishOpt, error) {
		m, _, err := reply(i)
		return m, []jetstream.PublishOpt{jetstream.WithMsgID(m.Header.Get(hdrRun) + ".again")}, err
	}); err != nil {
		return resumeRun{}, err
	}
	sr := &storageResume{subject: storageEventPrefix + prefix + ".", from: from}
	sr.data = payload(resumeEventBytes - storedOverhead(sr.subject+conversationID(prefix, 0), eventHeader(conversationID(prefix, 0))))
	return t.applyReplies(ctx, js, prefix, rawReplyConsumer+"_storage", n, revisions, sr)
}

// storageResume is what applyReplies does for the storage floor: the
// replies from sequence from on, and before each CAS an event message on
// the conversation's own subject, as toolgate's.
type storageResume struct {
	subject string
	data    []byte
	from    uint64
}

// event is conversation conv's event message.
func (sr *storageResume) event(conv string) *nats.Msg {
	return &nats.Msg{Subject: sr.subject + conv, Data: sr.data, Header: eventHeader(conv)}
}

// applyReplies consumes the n replies with consumer name and updates each
// conversation's entry with the reply, by revision (revisions, which it
// moves on to the entries' new ones), and times it.
func (t *RawMemoryTarget) applyReplies(ctx context.Context, js jetstream.JetStream, prefix, name string, n int, revisions []uint64, storage *storageResume) (resumeRun, error) {
	cfg := jetstream.ConsumerConfig{
		Durable:       name,
		FilterSubject: rawReplyPrefix + ">",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxAckPending: 2 * pipelineDepth,
	}
	if storage != nil {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, storage.from
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, rawRepliesStream+"_"+prefix, cfg)
	if err != nil {
		return resumeRun{}, fmt.Errorf("raw memory: create reply consumer: %w", err)
	}
	var (
		bg      failure
		events  atomic.Int64 // the storage floor's event messages stored
		applied atomic.Int64
		all     = make(chan struct{})
		index   = make(map[string]int, n)
	)
	for i := range n {
		index[runID(prefix, int64(i))] = i
	}
	kvSubject := "$KV." + rawBucket + "_" + prefix + "."
	start := time.Now()
	// Acks arrive on the pipeline's one goroutine, in order.
	last, gap := start, time.Duration(0)
	p := newPipeline(ctx, js, pipelineDepth, func(i int, ack *jetstream.PubAck) {
		if i < 0 {
			events.Add(1)
			return
		}
		revisions[i] = ack.Sequence
		now := time.Now()
		gap, last = max(gap, now.Sub(last)), now
		if applied.Add(1) == int64(n) {
			close(all)
		}
	})
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		var rep wire.CallReply
		if err := wire.Decode(msg.Data(), msg.Headers().Get(hdrContentType), &rep); err != nil {
			bg.set(fmt.Errorf("decode reply: %w", err))
			return
		}
		i, ok := index[rep.RunID]
		if !ok {
			bg.set(fmt.Errorf("reply for unknown run %s", rep.RunID))
			return
		}
		conv := conversationID(prefix, i)
		rec := newPausedRecord(conv, rep.RunID, rep.ToolCallID)
		rec.Status, rec.Batch.Reply = "resuming", &rep
		data, err := msgpack.Marshal(rec)
		if err != nil {
			bg.set(fmt.Errorf("encode record: %w", err))
			return
		}
		if storage != nil {
			if err := p.publish(ctx, storage.event(conv), -1); err != nil {
				bg.set(err)
				return
			}
		}
		out := &nats.Msg{Subject: kvSubject + "conv." + conv, Data: data, Header: nats.Header{}}
		out.Header.Set(hdrExpectedSeq, strconv.FormatUint(revisions[i], 10))
		if err := p.publish(ctx, out, i); err != nil {
			bg.set(err)
			return
		}
		_ = msg.Ack()
	}, jetstream.ConsumeErrHandler(consumeErrHandler(&bg)))
	if err != nil {
		p.wait()
		return resumeRun{}, fmt.Errorf("raw memory: consume replies: %w", err)
	}
	var waitErr error
	select {
	case <-all:
	case <-bg.failed():
		waitErr = bg.get()
	case <-p.bg.failed():
		waitErr = p.bg.get()
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	elapsed := time.Since(start)
	stopConsume(cc)
	if err := errors.Join(waitErr, p.wait()); err != nil {
		return resumeRun{}, fmt.Errorf("raw memory: apply replies: %w", err)
	}
	if storage != nil && events.Load() != int64(n) {
		return resumeRun{}, fmt.Errorf("raw memory: storage floor: %d event messages stored for %d conversations", events.Load(), n)
	}
	return resumeRun{elapsed: elapsed, gap: gap}, nil
}

// resumeRun is how a resume went: how long it took, and the longest time
// in which no conversation finished resuming (MemoryMeasurement.Distorted).
type resumeRun struct {
	elapsed time.Duration
	gap     time.Duration
}

func conversationID(prefix string, i int) string { return fmt.Sprintf("conv_%s%012d", prefix, i) }

// heapSlope measures what holding n paused conversations costs the heap:
// hold(from, to) pauses conversations [from, to), quiet waits until
// nothing is on its way and the server's caches of it have expired. The
// first half is paused and waited for, then the heap measured, then the
// second half, and the figure is what the second half added per
// conversation: a baseline taken before the first one paused once held
// some 40 MB that was released during the case (-1,347 B per conversation
// at 10,000), and what every set-up holds whatever the number (the
// server's buffers of each stream written) cancels out. atPause is the
// earlier figure: the heap as soon as all n have paused, against the heap
// before the first, per conversation.
//
// heap is the live heap after a collection (heapAfterGC, or a side's
// own way of taking it: toolgate's outside its reconcile passes). own,
// when not nil, is a side's own share of the heap as of the last
// collection (toolgateHeap), measured the same way: ownPer.
func heapSlope(ctx context.Context, n int, hold func(from, to int) error, quiet func(context.Context) error, heap func() uint64, own func() int64) (atPause, settled, ownPer float64, err error) {
	half := n / 2
	if err := quiet(ctx); err != nil {
		return 0, 0, 0, err
	}
	before := heap()
	if half > 0 {
		if err := hold(0, half); err != nil {
			return 0, 0, 0, err
		}
		if err := quiet(ctx); err != nil {
			return 0, 0, 0, err
		}
	}
	mid := heap()
	var ownMid int64
	if own != nil {
		ownMid = own()
	}
	if err := hold(half, n); err != nil {
		return 0, 0, 0, err
	}
	atPause = heapPer(heap(), before, n)
	if err := quiet(ctx); err != nil {
		return 0, 0, 0, err
	}
	settled = heapPer(heap(), mid, n-half)
	if own != nil {
		ownPer = float64(own()-ownMid) / float64(n-half)
	}
	return atPause, settled, ownPer, nil
}
