package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
)

// Streams and subjects of the raw baseline; they do not overlap toolgate's,
// so both sides can share one server.
const (
	rawCallsStream   = "BENCH_CALLS"
	rawRepliesStream = "BENCH_REPLIES"
	rawCallPrefix    = "bench.call."
	rawReplyPrefix   = "bench.reply."
	rawCallConsumer  = "call_" + sampleTool
	rawReplyConsumer = "orchestrator"
)

// Message headers, as toolgate sets them.
const (
	hdrContentType  = "Content-Type"
	hdrRun          = "Toolgate-Run"
	hdrConversation = "Toolgate-Conversation"
	hdrCall         = "Toolgate-Call"
)

// RawTarget is the JetStream baseline: the same traffic as toolgate's
// deferred calls with nothing but JetStream in between. A conversation
// publishes its batch of CallRequests to a work-queue stream with
// PublishAsync and checks every ack; Case.Workers workers, each on its own
// connection, pull one call at a time (Consume with PullMaxMessages(1)),
// publish the CallReply to a limits stream, then ack the call; one
// consumer (the orchestrator's place) collects the replies, and a batch is
// complete when all its replies are in.
type RawTarget struct {
	env *Env
	seq atomic.Int64
	// storage makes it the storage floor (NewStorageTarget).
	storage *StorageSizes
	// lookup makes its workers look each call up in the calls stream
	// before replying (NewStorageLookupTarget).
	lookup bool
}

// NewRawTarget returns the JetStream baseline on env.
func NewRawTarget(env *Env) *RawTarget { return &RawTarget{env: env} }

// Name is "raw", "storage" for the storage floor, or "storage+lookup"
// for the storage floor with the look-up.
func (t *RawTarget) Name() string {
	switch {
	case t.storage != nil && t.lookup:
		return "storage+lookup"
	case t.storage != nil:
		return "storage"
	}
	return "raw"
}

// rawPullExpiry matches the pull expiry toolgate's consumers use (AckWait/3
// of their 30 s), so both sides pull the same way; with the library's 30 s a
// stalled pull can hold a redelivery for a whole AckWait.
var rawPullExpiry = jetstream.PullExpiry(10 * time.Second)

// rawStreams are toolgate's calls and replies streams under other names,
// new ones for each measurement: nats-server removes a deleted stream's
// store in the background, and creating one of the same name at once can
// fail ("error creating store for stream").
func rawStreams(gen string) (calls, replies jetstream.StreamConfig, err error) {
	if calls, err = streamAs(wire.StreamCalls, rawCallsStream+"_"+gen, rawCallPrefix+">"); err != nil {
		return calls, replies, err
	}
	replies, err = streamAs(wire.StreamReplies, rawRepliesStream+"_"+gen, rawReplyPrefix+">")
	return calls, replies, err
}

// streamAs is toolgate's stream name configured as bus.Setup configures
// it, under another name and subjects.
func streamAs(name, as string, subjects ...string) (jetstream.StreamConfig, error) {
	for _, sc := range (bus.SetupConfig{}).StreamConfigs() {
		if sc.Name == name {
			sc.Name, sc.Subjects = as, subjects
			return sc, nil
		}
	}
	return jetstream.StreamConfig{}, fmt.Errorf("bus stream configs lack stream %s", name)
}

// Run measures one case on fresh streams, deleted afterwards.
func (t *RawTarget) Run(ctx context.Context, c Case) (m Measurement, err error) {
	if err := c.validate(); err != nil {
		return Measurement{}, fmt.Errorf("%s: %w", t.Name(), err)
	}
	if t.storage != nil && c.Batch != 1 {
		return Measurement{}, fmt.Errorf("storage: batch %d: the storage floor is of batch-1 calls", c.Batch)
	}
	gen := strconv.FormatInt(t.seq.Add(1), 10)
	prefix := "j" + gen
	orch, err := t.env.Connect(ctx, "bench-orchestrator")
	if err != nil {
		return Measurement{}, err
	}
	defer orch.Close()
	js := orch.JetStream()

	callsCfg, repliesCfg, err := rawStreams(prefix)
	if err != nil {
		return Measurement{}, err
	}
	configs := []jetstream.StreamConfig{callsCfg, repliesCfg}
	if t.storage != nil {
		logCfg, eventsCfg, err := storageStreams(prefix)
		if err != nil {
			return Measurement{}, err
		}
		configs = append(configs, logCfg, eventsCfg)
	}
	for _, sc := range configs {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			return Measurement{}, fmt.Errorf("raw: create stream %s: %w", sc.Name, err)
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if derr := js.DeleteStream(dctx, sc.Name); derr != nil && err == nil {
				err = fmt.Errorf("raw: delete stream %s: %w", sc.Name, derr)
			}
		}()
	}
	var bg failure
	var redelivered atomic.Int64
	reg := &registry{}
	var st *storageRun
	if t.storage != nil {
		st = newStorageRun(js, prefix, *t.storage, &bg)
		defer st.pending.Wait()
	}
	collect, err := collectRawReplies(ctx, js, callsCfg.Name, repliesCfg.Name, c, reg, st, &bg, &redelivered)
	if err != nil {
		return Measurement{}, err
	}
	defer stopConsume(collect)

	for w := range c.Workers {
		stop, err := t.startWorker(ctx, callsCfg.Name, fmt.Sprintf("bench-worker-%d", w), t.lookup, &bg, &redelivered)
		if err != nil {
			return Measurement{}, err
		}
		defer stop()
	}
	send := func(ctx context.Context, b *batch) error {
		if st != nil {
			if err := st.start(ctx, b); err != nil {
				return err
			}
		}
		return sendRawBatch(ctx, js, b)
	}
	streams := make([]string, len(configs))
	for i, sc := range configs {
		streams[i] = sc.Name
	}
	states0, err := streamStates(ctx, orch, streams)
	if err != nil {
		return Measurement{}, fmt.Errorf("%s: %w", t.Name(), err)
	}
	m, err = warmAndMeasure(ctx, c, prefix, send, reg, &bg)
	if err != nil {
		return Measurement{}, fmt.Errorf("%s %s: %w", t.Name(), c.Name(), err)
	}
	// Over the warm-up and the measured calls, as both are the same.
	if states, err := streamStates(ctx, orch, streams); err == nil {
		m.Stored, m.StoredBytes = storedPer(float64(m.Calls+c.WarmupBatches()*c.Batch), configs, states0, states)
	}
	m.Redelivered = redelivered.Load()
	m.Stalls = bg.stalls.Load()
	return m, nil
}

// collectRawReplies creates the raw case's call consumer (which its
// workers pull from) and its reply consumer, and consumes the replies into
// reg.
func collectRawReplies(ctx context.Context, js jetstream.JetStream, calls, replies string, c Case, reg *registry, st *storageRun, bg *failure, redelivered *atomic.Int64) (jetstream.ConsumeContext, error) {
	if _, err := js.CreateOrUpdateConsumer(ctx, calls, rawCallConsumerConfig(c.Workers)); err != nil {
		return nil, fmt.Errorf("raw: create call consumer: %w", err)
	}
	replyCons, err := js.CreateOrUpdateConsumer(ctx, replies, rawReplyConsumerConfig(rawReplyConsumer, rawReplyPrefix+">", c.Window))
	if err != nil {
		return nil, fmt.Errorf("raw: create reply consumer: %w", err)
	}
	collect, err := replyCons.Consume(rawReplyHandler(ctx, reg, st, bg, redelivered), rawPullExpiry, jetstream.ConsumeErrHandler(consumeErrHandler(bg)))
	if err != nil {
		return nil, fmt.Errorf("raw: consume replies: %w", err)
	}
	return collect, nil
}

// rawCallConsumerConfig is the durable the raw workers of a case of
// workers share.
func rawCallConsumerConfig(workers int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       rawCallConsumer,
		FilterSubject: rawCallPrefix + sampleTool,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: max(1000, 2*workers),
	}
}

// rawReplyConsumerConfig is a reply durable of the raw side, filtered on
// filter, for window calls in flight.
func rawReplyConsumerConfig(durable, filter string, window int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       durable,
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: max(1000, 2*window),
	}
}

// rawReplyHandler settles each reply in reg, or completes its
// conversation's storage first when st is the storage floor's.
func rawReplyHandler(ctx context.Context, reg *registry, st *storageRun, bg *failure, redelivered *atomic.Int64) jetstream.MessageHandler {
	return func(msg jetstream.Msg) {
		at := time.Now()
		countRedelivery(msg, redelivered)
		var rep wire.CallReply
		if err := wire.Decode(msg.Data(), msg.Headers().Get(hdrContentType), &rep); err != nil {
			bg.set(fmt.Errorf("decode reply: %w", err))
			_ = msg.Term()
			return
		}
		if st != nil {
			st.reply(ctx, msg, rep, reg)
			return
		}
		reg.arrive(rep.ToolCallID, at)
		_ = msg.Ack()
	}
}

// sendRawBatch publishes a batch's calls as the raw orchestrator does and
// waits for their acks.
func sendRawBatch(ctx context.Context, js jetstream.JetStream, b *batch) error {
	futures := make([]jetstream.PubAckFuture, len(b.calls))
	for i, id := range b.calls {
		if b.sent[i].IsZero() {
			b.sent[i] = time.Now()
		}
		data, err := wire.Encode(sampleCallRequest(b.run, b.conversation, id), wire.ContentTypeMsgpack)
		if err != nil {
			return err
		}
		msg := &nats.Msg{Subject: rawCallPrefix + sampleTool, Data: data, Header: nats.Header{}}
		msg.Header.Set(hdrContentType, wire.ContentTypeMsgpack)
		msg.Header.Set(hdrRun, b.run)
		msg.Header.Set(hdrConversation, b.conversation)
		msg.Header.Set(hdrCall, id)
		f, err := js.PublishMsgAsync(msg, jetstream.WithMsgID(b.run+"."+id+".call"))
		if err != nil {
			return fmt.Errorf("publish call %s: %w", id, err)
		}
		futures[i] = f
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish call %s: %w", b.calls[i], err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// startWorker connects one worker and starts pulling calls; stop drains it
// and closes its connection. With lookup, the worker looks each call up
// by its stream sequence before replying, as toolgate's does (a get of the
// calls stream; its stream handle made once) and skips one no longer
// there.
func (t *RawTarget) startWorker(ctx context.Context, stream, name string, lookup bool, bg *failure, redelivered *atomic.Int64) (stop func(), err error) {
	b, err := t.env.Connect(ctx, name)
	if err != nil {
		return nil, err
	}
	stopConsume, err := consumeCalls(ctx, b.JetStream(), stream, name, lookup, bg, redelivered)
	if err != nil {
		b.Close()
		return nil, err
	}
	return func() {
		stopConsume()
		b.Close()
	}, nil
}

// consumeCalls is a raw worker named name on js: it pulls one call at a
// time from stream's call durable, publishes its CallReply, then acks the
// call; with lookup, it looks the call up first (startWorker). stop
// drains it.
func consumeCalls(ctx context.Context, js jetstream.JetStream, stream, name string, lookup bool, bg *failure, redelivered *atomic.Int64) (stop func(), err error) {
	cons, err := js.Consumer(ctx, stream, rawCallConsumer)
	if err != nil {
		return nil, fmt.Errorf("raw worker %s: %w", name, err)
	}
	var calls jetstream.Stream
	if lookup {
		if calls, err = js.Stream(ctx, stream); err != nil {
			return nil, fmt.Errorf("raw worker %s: %w", name, err)
		}
	}
	// A worker publishes with its own context: a call in hand when the run
	// ends is abandoned by the drain, not failed midway.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		countRedelivery(msg, redelivered)
		var req wire.CallRequest
		if err := wire.Decode(msg.Data(), msg.Headers().Get(hdrContentType), &req); err != nil {
			bg.set(fmt.Errorf("worker %s: decode call: %w", name, err))
			_ = msg.Term()
			return
		}
		if calls != nil {
			queued, err := lookUpCall(wctx, calls, msg)
			if err != nil {
				bg.set(fmt.Errorf("worker %s: look up call: %w", name, err))
				_ = msg.NakWithDelay(100 * time.Millisecond)
				return
			}
			if !queued {
				// Acked already (a redelivery whose reply is out).
				_ = msg.Ack()
				return
			}
		}
		data, err := wire.Encode(replyFor(req, name), wire.ContentTypeMsgpack)
		if err != nil {
			bg.set(fmt.Errorf("worker %s: encode reply: %w", name, err))
			_ = msg.Term()
			return
		}
		out := &nats.Msg{Subject: rawReplyPrefix + req.RunID + "." + wire.ReplyKindCall, Data: data, Header: nats.Header{}}
		out.Header.Set(hdrContentType, wire.ContentTypeMsgpack)
		out.Header.Set(hdrRun, req.RunID)
		out.Header.Set(hdrCall, req.ToolCallID)
		if _, err := js.PublishMsg(wctx, out, jetstream.WithMsgID(req.RunID+"."+req.ToolCallID+".result")); err != nil {
			bg.set(fmt.Errorf("worker %s: publish reply: %w", name, err))
			_ = msg.NakWithDelay(100 * time.Millisecond)
			return
		}
		_ = msg.Ack()
	}, jetstream.PullMaxMessages(1), rawPullExpiry, jetstream.ConsumeErrHandler(consumeErrHandler(bg)))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("raw worker %s: consume: %w", name, err)
	}
	return func() {
		stopConsume(cc)
		cancel()
	}, nil
}

// lookUpCall reports whether msg is still in its stream: the get
// toolgate's worker sends before it runs a call (bus.CallQueued's common
// path: a direct get, the library's choice where the stream allows them),
// bounded as its is.
func lookUpCall(ctx context.Context, calls jetstream.Stream, msg jetstream.Msg) (bool, error) {
	md, err := msg.Metadata()
	if err != nil {
		return false, err
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = calls.GetMsg(lctx, md.Sequence.Stream)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return false, nil
	}
	return false, err
}

func countRedelivery(msg jetstream.Msg, n *atomic.Int64) {
	if md, err := msg.Metadata(); err == nil && md.NumDelivered > 1 {
		n.Add(1)
	}
}

// stopConsume drains a consumer and waits (bounded) until its handler has
// returned for the last time.
func stopConsume(cc jetstream.ConsumeContext) {
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-time.After(5 * time.Second):
		cc.Stop()
	}
}

// consumeErrHandler keeps fatal consumer errors; missed heartbeats during
// a slow moment are not fatal.
func consumeErrHandler(bg *failure) jetstream.ConsumeErrHandler {
	return func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			bg.stalls.Add(1)
			return
		}
		bg.set(fmt.Errorf("consume: %w", err))
	}
}
