package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// noStreamTook reports whether err is the server's answer that no stream
// took a publish: none captures its subject, or the one that does has no
// leader now.
func noStreamTook(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// noLeader is what awaitLeader keeps of one publish's attempts that no
// stream took.
type noLeader struct {
	since    time.Time     // the first of them
	captured bool          // a stream captures the subject, or that cannot be told
	wait     time.Duration // the pause before the next attempt
}

// failure is the error of a publish that no stream took (err) and that
// awaitLeader no longer sends again: ErrNoLeader when a stream captures
// its subject, ErrNotCaptured otherwise.
func (nl *noLeader) failure(err error) error {
	if nl.captured {
		return fmt.Errorf("%w: %w", ErrNoLeader, err)
	}
	return fmt.Errorf("%w: %w", ErrNotCaptured, err)
}

// awaitLeader reports, after a pause, whether a publish to subject
// that failed with err is to be sent again: err says that no stream took
// it, and its stream may be electing a leader. A replicated stream has
// none for the seconds after its leader's node went away, or while it
// lacks a quorum; a write that failed then would fail a run, a start or
// a reply for a moment the cluster rides out. A subject that no stream
// captures fails at once (asked of the meta leader once; when it cannot
// answer, being elected too, or the user may not ask, the publish waits);
// one still without a leader after ConnConfig.ElectionWait, or whose
// context ends first, fails (nl.failure). The pauses are the log append's
// backoff: logRetryWait, doubling to logRetryWaitMax.
func (b *Bus) awaitLeader(ctx context.Context, subject string, err error, nl *noLeader) bool {
	if !noStreamTook(err) || b.cfg.ElectionWait <= 0 || b.nc.IsClosed() {
		return false
	}
	if nl.since.IsZero() {
		nl.since, nl.wait = time.Now(), logRetryWait
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		_, lerr := b.js.StreamNameBySubject(lctx, subject)
		cancel()
		nl.captured = !errors.Is(lerr, jetstream.ErrStreamNotFound)
	}
	wait := nl.wait
	if !nl.captured || time.Since(nl.since)+wait > b.cfg.ElectionWait {
		return false
	}
	nl.wait = min(2*wait, logRetryWaitMax)
	b.logger.WarnContext(ctx, "no stream took the message (its leader may be being elected); sending it again",
		slog.String("subject", subject), slog.Duration("for", time.Since(nl.since)), slog.String("error", err.Error()))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
