package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// SetupConfig sizes toolgate's streams and buckets. Zero values take the
// documented defaults.
type SetupConfig struct {
	// Replicas of every stream and bucket: 1 on a single server, 3 in a
	// cluster. Defaults to 1.
	Replicas int
	// CallsMaxMsgs bounds the calls work queue; a publish beyond it is
	// refused (DiscardNew) rather than silently dropping old calls.
	// Defaults to 100000.
	CallsMaxMsgs int64
	// DuplicateWindow is how long a Nats-Msg-Id is remembered. Defaults to
	// 2m.
	DuplicateWindow time.Duration
	// ApprovalsMaxAge keeps approval requests for approvers that join
	// late. Defaults to 7 days.
	ApprovalsMaxAge time.Duration
	// RepliesMaxAge keeps results and decisions. Defaults to 7 days.
	RepliesMaxAge time.Duration
	// EventsMaxAge keeps conversation events. Defaults to 24h.
	EventsMaxAge time.Duration
	// DLQMaxAge keeps dead letters. Defaults to 30 days.
	DLQMaxAge time.Duration
	// AuditMaxAge keeps audit records; negative keeps them forever.
	// Defaults to forever.
	AuditMaxAge time.Duration
	// ToolsTTL is how long a tool advertisement lives unless renewed.
	// Defaults to 2m.
	ToolsTTL time.Duration
	// ReplyPartitions is the number of partitions replies are stored in
	// (partition.go), each consumed by the orchestrator replica that owns
	// it. Defaults to DefaultReplyPartitions; negative asks for none. A
	// stream keeps the partitions it has (keepPartitions).
	ReplyPartitions int
}

func (c SetupConfig) withDefaults() SetupConfig {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.CallsMaxMsgs <= 0 {
		c.CallsMaxMsgs = 100_000
	}
	def(&c.DuplicateWindow, 2*time.Minute)
	def(&c.ApprovalsMaxAge, 7*24*time.Hour)
	def(&c.RepliesMaxAge, 7*24*time.Hour)
	def(&c.EventsMaxAge, 24*time.Hour)
	def(&c.DLQMaxAge, 30*24*time.Hour)
	if c.AuditMaxAge < 0 {
		c.AuditMaxAge = 0
	}
	def(&c.ToolsTTL, 2*time.Minute)
	if c.ReplyPartitions == 0 {
		c.ReplyPartitions = DefaultReplyPartitions
	}
	return c
}

func (c SetupConfig) validate() error {
	for name, age := range map[string]time.Duration{
		"approvals": c.ApprovalsMaxAge, "replies": c.RepliesMaxAge,
		"events": c.EventsMaxAge, "dlq": c.DLQMaxAge,
	} {
		if age < c.DuplicateWindow {
			return fmt.Errorf("%s max age %s is shorter than the duplicate window %s", name, age, c.DuplicateWindow)
		}
	}
	if c.AuditMaxAge > 0 && c.AuditMaxAge < c.DuplicateWindow {
		return fmt.Errorf("audit max age %s is shorter than the duplicate window %s", c.AuditMaxAge, c.DuplicateWindow)
	}
	if c.ReplyPartitions > maxReplyPartitions {
		return fmt.Errorf("%d reply partitions: at most %d", c.ReplyPartitions, maxReplyPartitions)
	}
	return nil
}

// StreamConfigs are the stream configurations Setup applies.
func (c SetupConfig) StreamConfigs() []jetstream.StreamConfig {
	c = c.withDefaults()
	base := func(name, desc string, subjects ...string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: desc,
			Subjects:    subjects,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
			Retention:   jetstream.LimitsPolicy,
			Discard:     jetstream.DiscardOld,
			Duplicates:  c.DuplicateWindow,
		}
	}
	calls := base(wire.StreamCalls, "external tool calls for workers", wire.PrefixCall+".>")
	calls.Retention = jetstream.WorkQueuePolicy
	calls.Discard = jetstream.DiscardNew
	calls.MaxMsgs = c.CallsMaxMsgs
	// A worker looks each call up before running it (CallQueued): a
	// direct get costs about half a message get's CPU.
	calls.AllowDirect = true

	approvals := base(wire.StreamApprovals, "approval requests, fanned out to approvers", wire.PrefixApproval+".>")
	approvals.MaxAge = c.ApprovalsMaxAge

	replies := base(wire.StreamReplies, "tool results and approval decisions", wire.PrefixReply+".>")
	replies.MaxAge = c.RepliesMaxAge
	if c.ReplyPartitions > 0 {
		replies.SubjectTransform = replyTransform(c.ReplyPartitions)
	}

	events := base(wire.StreamEvents, "agent events per conversation", wire.PrefixEvent+".>")
	events.MaxAge = c.EventsMaxAge

	dlq := base(wire.StreamDLQ, "messages that could not be handled", wire.PrefixDLQ+".>")
	dlq.MaxAge = c.DLQMaxAge

	audit := base(wire.StreamAudit, "decisions and settlements kept for audit", wire.PrefixAudit+".>")
	audit.MaxAge = c.AuditMaxAge

	adv := base(wire.StreamAdvisories, "max-deliveries advisories of toolgate consumers",
		advisoryMaxDeliveries+"."+wire.StreamCalls+".*",
		advisoryMaxDeliveries+"."+wire.StreamApprovals+".*",
		advisoryMaxDeliveries+"."+wire.StreamReplies+".*",
	)
	adv.MaxAge = c.DLQMaxAge

	// A conversation's log is kept until the conversation is deleted; its
	// records are read by subject (direct gets), and a record larger than
	// the max payload is written as an atomic batch of parts.
	convs := base(StreamConversations, "conversation logs: one subject per conversation, a record per change", ConversationSubjects)
	convs.AllowDirect = true
	convs.AllowAtomicPublish = true

	return []jetstream.StreamConfig{calls, approvals, replies, events, dlq, audit, adv, convs}
}

// KeyValueConfigs are the bucket configurations Setup applies.
func (c SetupConfig) KeyValueConfigs() []jetstream.KeyValueConfig {
	c = c.withDefaults()
	return []jetstream.KeyValueConfig{
		{
			Bucket:      BucketIndex,
			Description: "conversations not finished (due.<id>), for the orchestrator's reconcile",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
		},
		{
			Bucket:      BucketReplicas,
			Description: "orchestrator replicas and the agents (with config digests) each runs, refreshed while it lives",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
		},
		{
			Bucket:      wire.BucketGrants,
			Description: "standing decisions (grants) that approve or deny calls before anyone is asked",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
		},
		{
			Bucket:      wire.BucketTools,
			Description: "tool definitions advertised by workers",
			History:     1,
			TTL:         c.ToolsTTL,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
		},
	}
}

// setupAttemptTimeout bounds one create/update request of Setup. A cluster
// without a meta leader never answers such a request, so without a bound
// Setup would hang on the first one until its context ended, even once a
// leader had been elected.
var setupAttemptTimeout = 5 * time.Second

// setupRetryWait is the pause between failed attempts of one Setup step.
var setupRetryWait = 250 * time.Millisecond

// Setup creates toolgate's streams and KV buckets, or updates them to cfg.
// It is idempotent; a change that JetStream cannot apply in place (such as
// the retention policy) is an error naming the stream. Each step is retried
// while it fails transiently (see Transient), as on a fresh cluster that
// has no meta leader yet, until ctx ends; other errors return at once.
func (b *Bus) Setup(ctx context.Context, cfg SetupConfig) (err error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	ctx, release := b.deny.guard(ctx, jsAPIFor(""))
	defer release()
	defer func() {
		if derr := denied(ctx); derr != nil {
			err = fmt.Errorf("setup: %w", derr)
		}
	}()
	// What is already as configured is left alone: every process runs
	// Setup when it starts, and an update of a stream while consumers of it
	// are being created races inside nats-server (v2.15.2: the file store's
	// config is written by the update and read by the consumer creation
	// without a common lock).
	for _, sc := range cfg.StreamConfigs() {
		if err := b.setupStep(ctx, "stream "+sc.Name, func(actx context.Context) error {
			if st, err := b.js.Stream(actx, sc.Name); err == nil {
				keepPartitions(&sc, st.CachedInfo().Config)
				if covers(st.CachedInfo().Config, sc) {
					return nil
				}
			}
			_, err := b.js.CreateOrUpdateStream(actx, sc)
			return err
		}); err != nil {
			return err
		}
	}
	for _, kc := range cfg.KeyValueConfigs() {
		if err := b.setupStep(ctx, "bucket "+kc.Bucket, func(actx context.Context) error {
			if kv, err := b.js.KeyValue(actx, kc.Bucket); err == nil {
				if st, err := kv.Status(actx); err == nil && covers(st.Config(), kc) {
					return nil
				}
			}
			_, err := b.js.CreateOrUpdateKeyValue(actx, kc)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// covers reports whether the existing configuration has every value the
// wanted one sets, compared field by field in their JSON forms (the server
// fills in defaults the wanted one leaves out, and reports an unset limit,
// 0 in a request, as -1).
func covers(existing, wanted any) bool {
	var have, want map[string]any
	for _, c := range []struct {
		v   any
		out *map[string]any
	}{{existing, &have}, {wanted, &want}} {
		b, err := json.Marshal(c.v)
		if err != nil {
			return false
		}
		if err := json.Unmarshal(b, c.out); err != nil {
			return false
		}
	}
	for k, v := range want {
		if reflect.DeepEqual(have[k], v) || (v == float64(0) && have[k] == float64(-1)) {
			continue
		}
		return false
	}
	return true
}

// setupStep runs one idempotent step with a per-attempt timeout until it
// succeeds, fails for good, or ctx ends.
func (b *Bus) setupStep(ctx context.Context, what string, step func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, setupAttemptTimeout)
		err := step(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !Transient(err) {
			if ctx.Err() != nil && attempt > 1 {
				return fmt.Errorf("setup %s: %w (after %d attempts: %w)", what, ctx.Err(), attempt, err)
			}
			return fmt.Errorf("setup %s: %w", what, err)
		}
		b.logger.Warn("setup step failed; retrying", slog.String("step", what),
			slog.Int("attempt", attempt), slog.Any("error", err))
		t := time.NewTimer(setupRetryWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("setup %s: %w (after %d attempts: %w)", what, ctx.Err(), attempt, err)
		case <-t.C:
		}
	}
}

// Transient reports whether err, from a JetStream API request, may go away
// by itself: a timeout, a cluster without a (meta) leader or still missing
// peers for the replicas asked (as while it boots), a stream not created
// yet. A permission error or a rejected configuration is not; a cluster
// that will never have enough peers fails when the caller's ctx ends, with
// this error as the last one.
func Transient(err error) bool {
	if err == nil {
		return false
	}
	// A consumer this user may not make or put back, until whoever may
	// does (it wraps the permission error).
	if errors.Is(err, ErrConsumerMissing) {
		return true
	}
	if errors.Is(err, ErrPermissionDenied) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jsErrCodeClusterNotAvail, jsErrCodeClusterNotLeader, jsErrCodeNoPeers, jetstream.JSErrCodeStreamNotFound:
			return true
		}
	}
	return false
}

// Server error codes of a cluster that cannot serve the request yet; the
// client library has no names for them.
const (
	jsErrCodeClusterNotAvail  jetstream.ErrorCode = 10008
	jsErrCodeClusterNotLeader jetstream.ErrorCode = 10009
	jsErrCodeNoPeers          jetstream.ErrorCode = 10005 // no suitable peers for placement
)

// errNotSetUp wraps a missing stream or bucket with what the operator
// does about it: the orchestrator makes them when it starts.
func errNotSetUp(err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("%w (%s)", err, NotSetUpHint)
	}
	return err
}

// NotSetUpHint tells an operator what to do about a stream or bucket that
// is not there yet.
const NotSetUpHint = "toolgate's streams and buckets are not set up on this NATS server yet: start the orchestrator first, which creates them when it starts (a program embedding toolgate: toolgate.Config.SetUp), or have an operator create them"
