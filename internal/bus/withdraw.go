package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// Withdrawing calls. The calls stream is a work queue: it holds a call
// until a worker acks it, and a message deleted from it is never delivered
// again. The orchestrator withdraws (deletes) the calls of a cancelled,
// expired or deleted conversation that no worker has acked, so that a
// worker that comes later never takes them; a worker that took one before
// it was withdrawn looks it up by its sequence before running it
// (CallQueued) and skips it once it is gone.

// MaxWithdrawScan bounds the messages of one tool's queue a withdrawal
// reads. A call's subject carries only its tool, so its messages are found
// by reading that tool's queue from its oldest call; the queue holds only
// calls no worker has acked, and a withdrawal stops once it found every
// call it looks for.
const MaxWithdrawScan = 10_000

// WithdrawCalls deletes from the calls stream the messages of tool's calls
// ids of run runID (those of every attempt) and returns how many it
// deleted. A call already acked (answered) has none left; one a worker
// holds unacked is deleted too, and the worker skips it (CallQueued) or,
// when it is running it already, finishes it and its reply is refused.
// A queue longer than MaxWithdrawScan is read that far and the rest left:
// a worker then runs such a call, and its reply is refused as late.
func (b *Bus) WithdrawCalls(ctx context.Context, tool, runID string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	subj, err := wire.CallSubject(tool)
	if err != nil {
		return 0, err
	}
	st, err := b.stream(ctx, wire.StreamCalls)
	if err != nil {
		return 0, fmt.Errorf("withdraw calls of run %s: %w", runID, err)
	}
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	deleted := 0
	seq := uint64(1)
	for range MaxWithdrawScan {
		// From the leader: the stream allows direct gets, which a
		// replica behind it may answer without a call just queued.
		m, ok, err := b.leaderMsg(ctx, wire.StreamCalls, seq, subj)
		if err == nil && !ok {
			return deleted, nil
		}
		if err != nil {
			return deleted, fmt.Errorf("withdraw calls of run %s: read %s: %w", runID, subj, err)
		}
		seq = m.Sequence + 1
		if m.Header.Get(wire.HeaderRun) != runID || !want[m.Header.Get(wire.HeaderCall)] {
			continue
		}
		if err := st.DeleteMsg(ctx, m.Sequence); err != nil {
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				// Acked meanwhile.
				continue
			}
			return deleted, fmt.Errorf("withdraw call %s of run %s: %w", m.Header.Get(wire.HeaderCall), runID, err)
		}
		deleted++
	}
	return deleted, fmt.Errorf("withdraw calls of run %s: the queue of %s holds more than %d calls; the rest were not read", runID, tool, MaxWithdrawScan)
}

// CallQueued reports whether the call message at stream sequence seq is
// still in the calls stream: false once it was withdrawn (WithdrawCalls),
// or acked. A worker asks before it runs a call it was delivered.
// A user not allowed the lookup (NATS users written before it was added
// to the worker's role) gets ErrPermissionDenied at once.
//
// It asks first with a direct get, which the calls stream allows and any
// of its replicas answers without a JetStream API request (about half the
// CPU of a message get; bench/README.md): a call found is queued. A call
// not found there may be one a replica behind the leader has not stored
// yet, so the stream's leader decides, with a message get. A stream set
// up before it allowed direct gets (no one answers them) or a user not
// allowed them (written before the worker's role was) makes this
// connection ask only the leader from then on.
//
// "Not found" is believed only from a stream leader that has stored seq
// (its last sequence is at least seq): in a cluster, a call can be
// delivered by a consumer whose node has applied it before the stream's
// leader has (a leader just elected, or one starved of CPU), and that
// leader answers "not found" for a call no one withdrew. The worker then
// acked it unrun and without a reply, and its conversation waited until
// the call's deadline (TestClusterLeaderKilledUnderLoad under load).
func (b *Bus) CallQueued(ctx context.Context, seq uint64) (bool, error) {
	if !b.noDirectCalls.Load() && b.callDirect(ctx, seq) {
		return true, nil
	}
	api := b.apiPrefix()
	gctx, release := b.deny.guard(ctx, func(v string) bool {
		return v == api+"STREAM.MSG.GET."+wire.StreamCalls || v == api+"STREAM.INFO."+wire.StreamCalls
	})
	defer release()
	_, found, err := b.leaderMsg(gctx, wire.StreamCalls, seq, "")
	if err == nil && !found {
		var st jetstream.Stream
		if st, err = b.stream(gctx, wire.StreamCalls); err == nil {
			var info *jetstream.StreamInfo
			if info, err = st.Info(gctx); err == nil {
				if info.State.LastSeq < seq {
					return true, nil
				}
				// Stored by now: a second look tells a call that came in
				// meanwhile from one taken out.
				_, found, err = b.leaderMsg(gctx, wire.StreamCalls, seq, "")
			}
		}
	}
	if err == nil {
		return found, nil
	}
	if d := denied(gctx); d != nil {
		err = d
	}
	return false, fmt.Errorf("look up call %d: %w", seq, err)
}

// directCallTimeout bounds a direct get of a call.
const directCallTimeout = time.Second

// callDirect reports whether a direct get finds the call at seq. Not
// found, or no answer, is false: the leader decides then. No one answering
// (a stream that does not allow direct gets) or a permission violation
// turns the direct gets of calls off for this connection; an answer late
// does not, as a server busy for a moment would otherwise leave every
// later look-up at the leader's cost.
func (b *Bus) callDirect(ctx context.Context, seq uint64) bool {
	subject := b.apiPrefix() + "DIRECT.GET." + wire.StreamCalls
	// An answer lost leaves the leader time to answer.
	tctx, cancel := context.WithTimeout(ctx, directCallTimeout)
	defer cancel()
	dctx, release := b.deny.guard(tctx, exactSubject(subject))
	defer release()
	found := false
	_, err := b.directGetBatch(dctx, wire.StreamCalls, directGetRequest{Seq: seq}, 1, func(LogMsg) error {
		found = true
		return nil
	})
	var status *directGetStatusError
	switch {
	case err == nil:
		return found
	case denied(dctx) != nil:
		b.noDirectCalls.Store(true)
		b.logger.InfoContext(ctx, "calls are looked up through the stream's leader only: this user may not send direct gets of the calls stream (add "+subject+" to its permissions)")
	case errors.As(err, &status) && status.Status == "503":
		b.noDirectCalls.Store(true)
		b.logger.InfoContext(ctx, "calls are looked up through the stream's leader only: the calls stream answers no direct gets (set up before it allowed them; Setup allows them)", slog.Any("error", err))
	}
	return false
}
