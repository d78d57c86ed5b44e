package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/wire"
)

// A conversation whose log cannot be read (CorruptError) cannot be deleted
// the usual way, which reads it to check that it is finished. DeleteCorrupt
// is the operator's way out: allowed only while reading the log from its
// start fails, it removes what there is and says so in the audit stream.

// AuditKindConversation is the kind of the audit record of a corrupt
// conversation's delete; its RunID is the conversation id, since no run of
// it can be read.
const AuditKindConversation = "conversation"

// DeleteCorrupt removes a conversation whose log cannot be read: its log
// (replaced by a tombstone, as Delete leaves), its due entry and its
// events; an audit record keeps why. A conversation that can be read is
// refused (*ConflictError): Delete it, finished or not as Delete requires.
// Whatever state it was in is lost: pending calls answered later are
// refused as for any deleted conversation.
func (o *Orchestrator) DeleteCorrupt(ctx context.Context, id string) error {
	if !ValidID(id) {
		return fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	}
	ctx = answersRequest(ctx)
	// From the start, not from the cache: a state cached before the damage
	// would hide it.
	c := &conversation.State{}
	_, last, err := o.store.fold(ctx, id, c, 0)
	var corrupt *CorruptError
	switch {
	case errors.As(err, &corrupt):
	case err != nil:
		return err
	case last == 0:
		return fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	case c.Status == conversation.StatusDeleted:
		return fmt.Errorf("conversation %s: %w", id, errDeleted)
	default:
		return &conversation.ConflictError{ConversationID: id, Status: c.Status, Op: conversation.OpDeleteCorrupt}
	}
	if err := o.store.dropLog(ctx, id); err != nil {
		return err
	}
	if err := o.events.purge(ctx, id); err != nil {
		return fmt.Errorf("delete conversation %s: its events: %w", id, err)
	}
	rec := AuditRecord{
		Kind: AuditKindConversation, Verdict: "deleted", Reason: "corrupt: " + corrupt.Error(),
		ConversationID: id, RunID: id, Time: o.clock().UTC(),
	}
	hdr := nats.Header{}
	hdr.Set(wire.HeaderConversation, id)
	if _, err := o.bus.PublishAudit(ctx, id, "audit/conversation/"+id+"/"+rec.Time.Format(time.RFC3339Nano), rec, hdr); err != nil {
		return fmt.Errorf("conversation %s deleted, but its audit record was not written: %w", id, err)
	}
	o.log.WarnContext(ctx, "corrupt conversation deleted", slog.String("conversation_id", id), slog.String("error", corrupt.Error()))
	return nil
}

// A stream whose meta.inf is damaged while its server is down is skipped
// by the server when it starts again (it logs a checksum warning and goes
// on): the stream is gone although its messages are still on disk, and
// every read and write of it fails until it is created again, which the
// server does over the messages it finds. A replica created its streams
// only at start, so it failed every request until it was restarted. Now
// it looks for its streams and buckets every streamCheckInterval and
// creates a missing one again with toolgate's configuration (the
// replicas of the others), saying so; what it cannot restore is named in
// Health until it can.

// streamCheckInterval is how often a replica checks that toolgate's
// streams and buckets are on the server.
const streamCheckInterval = 5 * time.Second

func (co *core) streamsLoop() {
	t := newTicker(streamCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-co.stopping:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(co.loopCtx, streamCheckInterval)
		co.restoreStreams(ctx)
		cancel()
	}
}

// restoreStreams creates again those of toolgate's streams and buckets
// that the server does not have, when at least one of them is there to
// take the replicas from (none there is a server never set up, or one
// whose store is gone: an operator's to see to).
func (co *core) restoreStreams(ctx context.Context) {
	js := co.bus.JetStream()
	cfg := bus.SetupConfig{}
	var missing []string
	replicas := 0
	have := func(name string) bool {
		st, err := js.Stream(ctx, name)
		switch {
		case err == nil:
			replicas = max(replicas, st.CachedInfo().Config.Replicas)
			return true
		case errors.Is(err, jetstream.ErrStreamNotFound):
			missing = append(missing, name)
			return false
		default:
			return true // unknown: the server may be away; next time
		}
	}
	var streams []jetstream.StreamConfig
	var buckets []jetstream.KeyValueConfig
	for _, sc := range cfg.StreamConfigs() {
		if !have(sc.Name) {
			streams = append(streams, sc)
		}
	}
	for _, kc := range cfg.KeyValueConfigs() {
		if !have("KV_" + kc.Bucket) {
			buckets = append(buckets, kc)
		}
	}
	if ctx.Err() != nil {
		return
	}
	if len(missing) == 0 {
		co.streams.set(nil)
		return
	}
	if replicas == 0 {
		err := fmt.Errorf("streams %s are missing on the NATS server, and so are all the others: set it up again (an orchestrator restart does)", strings.Join(missing, ", "))
		co.log.ErrorContext(ctx, "streams missing", slog.String("error", err.Error()))
		co.streams.set(err)
		return
	}
	co.log.ErrorContext(ctx, "streams missing on the NATS server (one whose meta.inf is damaged is skipped when the server starts; its messages stay on disk): creating them again",
		slog.Any("streams", missing), slog.Int("replicas", replicas))
	var failed []string
	for _, sc := range streams {
		sc.Replicas = replicas
		if _, err := js.CreateStream(ctx, sc); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			failed = append(failed, fmt.Sprintf("%s: %v", sc.Name, err))
		}
	}
	for _, kc := range buckets {
		kc.Replicas = replicas
		if _, err := js.CreateKeyValue(ctx, kc); err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			failed = append(failed, fmt.Sprintf("KV_%s: %v", kc.Bucket, err))
		}
	}
	if len(failed) > 0 {
		err := fmt.Errorf("streams missing on the NATS server and not created again: %s", strings.Join(failed, "; "))
		co.log.ErrorContext(ctx, "streams missing", slog.String("error", err.Error()))
		co.streams.set(err)
		return
	}
	co.log.WarnContext(ctx, "streams created again", slog.Any("streams", missing))
	co.streams.set(nil)
}
