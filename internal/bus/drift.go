package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// ErrConsumerMissing is returned when a durable consumer does not exist and
// this connection's user may not make it: a worker's call_<tool>, which the
// orchestrator makes before the tool's first call (EnsureCallConsumer).
// Transient reports it, so that a worker waits for it.
var ErrConsumerMissing = errors.New("consumer not made yet")

// ConsumerDrift is a durable consumer whose configuration on the server is
// not the one its subscription set: another client changed it (an edit
// stops it from delivering what its owner expects, and what is published
// meanwhile may be skipped for good).
type ConsumerDrift struct {
	Stream, Consumer string
	// Changes say, per setting, what was expected and what the server has.
	Changes []string
	// Restored is set when the subscription put its configuration back.
	Restored bool
	// Replayed counts the messages from the consumer's last check as
	// expected up to its place when put back, read again and handed to the
	// handlers after a changed filter was put back (what it skipped
	// meanwhile among them); ReplayErr is why that read ended early.
	Replayed  int
	ReplayErr error
	// Err is why it could not be put back (a permission error for a user
	// that may not update the consumer).
	Err error
}

func (d ConsumerDrift) String() string { return strings.Join(d.Changes, "; ") }

// ConsumerDrifts is how many times a consumer of this connection was found
// with a configuration other than its subscription's (at start, when it
// could not be put back, or while running).
func (b *Bus) ConsumerDrifts() int64 { return b.drifts.Load() }

// configDrift lists the settings of have that differ from want, among
// those that decide what a consumer delivers and when: the filter, the
// acks, the redeliveries, the pull limits, headers only, pausing. Settings
// toolgate leaves to the server's defaults are expected at their zero.
func configDrift(want, have jetstream.ConsumerConfig) []string {
	var out []string
	diff := func(name string, w, h any) {
		out = append(out, fmt.Sprintf("%s: want %v, have %v", name, w, h))
	}
	if want.FilterSubject != have.FilterSubject || !slices.Equal(want.FilterSubjects, have.FilterSubjects) {
		diff("filter", filterOf(want), filterOf(have))
	}
	if want.AckPolicy != have.AckPolicy {
		diff("ack policy", want.AckPolicy, have.AckPolicy)
	}
	if want.DeliverPolicy != have.DeliverPolicy {
		diff("deliver policy", want.DeliverPolicy, have.DeliverPolicy)
	}
	if want.AckWait != have.AckWait {
		diff("ack wait", want.AckWait, have.AckWait)
	}
	if want.MaxDeliver != have.MaxDeliver {
		diff("max deliver", want.MaxDeliver, have.MaxDeliver)
	}
	if want.MaxAckPending != have.MaxAckPending {
		diff("max ack pending", want.MaxAckPending, have.MaxAckPending)
	}
	if !slices.Equal(want.BackOff, have.BackOff) {
		diff("backoff", want.BackOff, have.BackOff)
	}
	if want.HeadersOnly != have.HeadersOnly {
		diff("headers only", want.HeadersOnly, have.HeadersOnly)
	}
	if want.InactiveThreshold != have.InactiveThreshold {
		diff("inactive threshold", want.InactiveThreshold, have.InactiveThreshold)
	}
	if want.MaxRequestBatch != have.MaxRequestBatch || want.MaxRequestExpires != have.MaxRequestExpires || want.MaxRequestMaxBytes != have.MaxRequestMaxBytes {
		diff("pull limits", fmt.Sprint(want.MaxRequestBatch, " ", want.MaxRequestExpires, " ", want.MaxRequestMaxBytes),
			fmt.Sprint(have.MaxRequestBatch, " ", have.MaxRequestExpires, " ", have.MaxRequestMaxBytes))
	}
	if have.PauseUntil != nil && have.PauseUntil.After(time.Now()) {
		diff("paused until", "not paused", have.PauseUntil.UTC().Format(time.RFC3339))
	}
	return out
}

func filterOf(c jetstream.ConsumerConfig) string {
	if len(c.FilterSubjects) > 0 {
		return strings.Join(c.FilterSubjects, ",")
	}
	if c.FilterSubject == "" {
		return `""`
	}
	return c.FilterSubject
}

// filterDrift reports whether the drift changes what the consumer
// delivers: bound to it, a handler would see another subject's messages
// (and dead-letter them).
func filterDrift(changes []string) bool {
	return slices.ContainsFunc(changes, func(c string) bool { return strings.HasPrefix(c, "filter:") })
}

// consumerAPI matches the API subjects that create or update durable of
// stream, for a permission error on them alone.
func consumerCreateAPI(stream, durable string) func(string) bool {
	newStyle := "$JS.API.CONSUMER.CREATE." + stream + "." + durable
	legacy := "$JS.API.CONSUMER.DURABLE.CREATE." + stream + "." + durable
	return func(v string) bool {
		return v == newStyle || strings.HasPrefix(v, newStyle+".") || v == legacy
	}
}

// bindConsumer finds the durable of want on stream, making it if it does
// not exist and putting its configuration back if it differs. A user that
// may not make it gets ErrConsumerMissing; one that may not update it gets
// the consumer as it is (the drift logged as an error and counted), unless
// its filter differs: then the consumer would hand it other messages, and
// an error wrapping ErrConsumerMissing says so. The configuration returned
// is the server's.
func (b *Bus) bindConsumer(ctx context.Context, stream string, want jetstream.ConsumerConfig, logger *slog.Logger, onDrift func(ConsumerDrift)) (jetstream.Consumer, jetstream.ConsumerConfig, error) {
	for attempt := 0; ; attempt++ {
		gctx, release := b.deny.guard(ctx, jsAPIFor(stream))
		cons, err := b.js.Consumer(gctx, stream, want.Durable)
		derr := denied(gctx)
		release()
		if derr != nil {
			return nil, want, derr
		}
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			if _, no := b.noCreate.Load(stream); no {
				// Refused before: waiting for whoever may make it, without
				// a permission violation on every look.
				return nil, want, fmt.Errorf("%w: %s of %s does not exist and this user may not make it", ErrConsumerMissing, want.Durable, stream)
			}
			cons, err = b.writeConsumer(ctx, stream, want, true)
			if errors.Is(err, ErrPermissionDenied) {
				b.noCreate.Store(stream, struct{}{})
			}
			if errors.Is(err, jetstream.ErrConsumerExists) && attempt < 3 {
				continue // made meanwhile by another client: look again
			}
			if errors.Is(err, ErrPermissionDenied) {
				return nil, want, fmt.Errorf("%w: %s of %s does not exist and this user may not make it: %w", ErrConsumerMissing, want.Durable, stream, err)
			}
			if err != nil {
				return nil, want, errNotSetUp(err)
			}
			return cons, want, nil
		}
		if err != nil {
			return nil, want, errNotSetUp(err)
		}
		have := cons.CachedInfo().Config
		changes := configDrift(want, have)
		if len(changes) == 0 {
			return cons, have, nil
		}
		upd, err := b.writeConsumer(ctx, stream, want, false)
		if err == nil {
			logger.Info("consumer configuration updated to this process's", slog.String("was", strings.Join(changes, "; ")))
			return upd, want, nil
		}
		d := ConsumerDrift{Stream: stream, Consumer: want.Durable, Changes: changes, Err: err}
		b.drifts.Add(1)
		if onDrift != nil {
			onDrift(d)
		}
		if !errors.Is(err, ErrPermissionDenied) {
			return nil, want, fmt.Errorf("update consumer %s of %s (%s): %w", want.Durable, stream, d, err)
		}
		if filterDrift(changes) {
			logger.Error("consumer configuration was changed by another client and this user may not put it back; not consuming it until it is fixed",
				slog.String("changes", d.String()), slog.Any("error", err))
			return nil, want, fmt.Errorf("%w: %s of %s has another configuration (%s) and this user may not put it back", ErrConsumerMissing, want.Durable, stream, d)
		}
		logger.Error("consumer configuration differs from this process's and this user may not put it back; consuming it as it is",
			slog.String("changes", d.String()), slog.Any("error", err))
		return cons, have, nil
	}
}

// writeConsumer creates (create) or updates the durable of cfg, with a
// permission error as ErrPermissionDenied.
func (b *Bus) writeConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig, create bool) (jetstream.Consumer, error) {
	gctx, release := b.deny.guard(ctx, consumerCreateAPI(stream, cfg.Durable))
	defer release()
	var cons jetstream.Consumer
	var err error
	if create {
		cons, err = b.js.CreateConsumer(gctx, stream, cfg)
	} else {
		cons, err = b.js.UpdateConsumer(gctx, stream, cfg)
	}
	if derr := denied(gctx); derr != nil {
		return nil, derr
	}
	return cons, err
}

// watchConfig compares the consumer's configuration on the server with
// want every cfg.CheckEvery until done: a change is logged as an error,
// counted, told to cfg.OnDrift and put back if this user may. Each drift
// is told once, and its end once. told is the drift found at start and
// not put back (the user may not): no update is tried then, nor after a
// refused one, so that the server does not log a permission violation at
// every check.
//
// A filter put back leaves behind what the consumer skipped while it was
// changed (the server moved its place past them): those messages, from
// the last check that found it as expected, are handed to replay (the
// subscription's own message callback), read through a consumer of their
// own; the handlers take the ones they had seen as repeats. Not on the
// work-queue stream TOOLGATE_CALLS, which allows no second consumer.
func (s *Subscription) watchConfig(ctx context.Context, b *Bus, stream string, want jetstream.ConsumerConfig, cfg ConsumeConfig, logger *slog.Logger, told string, lastGood uint64, replay func(jetstream.Msg)) {
	if cfg.CheckEvery < 0 {
		return
	}
	mayUpdate := told == ""
	tickUntil(s.watchEnd, cfg.CheckEvery, func() bool {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		cons, err := b.js.Consumer(ictx, stream, want.Durable)
		if err != nil {
			// A deleted consumer is made again by recreate; anything else
			// is looked at next time.
			return ctx.Err() == nil
		}
		changes := configDrift(want, cons.CachedInfo().Config)
		if len(changes) == 0 {
			lastGood = cons.CachedInfo().Delivered.Stream
			if told != "" {
				logger.Info("consumer configuration is as expected again")
				told = ""
			}
			return true
		}
		d := ConsumerDrift{Stream: stream, Consumer: want.Durable, Changes: changes, Err: ErrPermissionDenied}
		var upto uint64 // the place of the consumer put back
		if mayUpdate {
			var upd jetstream.Consumer
			if upd, d.Err = b.writeConsumer(ictx, stream, want, false); d.Err == nil {
				d.Restored = true
				upto = upd.CachedInfo().Delivered.Stream
			} else if errors.Is(d.Err, ErrPermissionDenied) {
				mayUpdate = false
			}
		}
		if d.Restored && filterDrift(changes) && stream != wire.StreamCalls && replay != nil && upto > lastGood {
			d.Replayed, d.ReplayErr = s.replaySkipped(ctx, b, stream, want, lastGood, upto, replay)
			lastGood = upto
		}
		if d.Restored || d.String() != told {
			b.drifts.Add(1)
			if d.Restored {
				logger.Error("consumer configuration was changed by another client; put it back",
					slog.String("changes", d.String()), slog.Int("replayed", d.Replayed), slog.Any("replay_error", d.ReplayErr))
			} else {
				logger.Error("consumer configuration was changed by another client and this user may not put it back",
					slog.String("changes", d.String()), slog.Any("error", d.Err))
			}
			if cfg.OnDrift != nil {
				cfg.OnDrift(d)
			}
		}
		if d.Restored {
			told = ""
		} else {
			told = d.String()
		}
		return true
	})
}

// replaySkipped hands replay the messages of stream under want's filter
// after sequence from up to upto, read through a consumer of their own
// (which expires by itself: approvers may not delete consumers there).
func (s *Subscription) replaySkipped(ctx context.Context, b *Bus, stream string, want jetstream.ConsumerConfig, from, upto uint64, replay func(jetstream.Msg)) (int, error) {
	cfg := jetstream.ConsumerConfig{
		FilterSubject:  want.FilterSubject,
		FilterSubjects: want.FilterSubjects,
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from + 1,
	}
	n := 0
	err := b.readOnce(ctx, stream, true, cfg, func(m jetstream.Msg, meta *jetstream.MsgMetadata) bool {
		if meta.Sequence.Stream > upto {
			return false
		}
		replay(m)
		n++
		return meta.Sequence.Stream < upto
	})
	return n, err
}
