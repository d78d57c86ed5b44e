// Package callctx is what a call's context carries between the worker
// engine (package worker) and the executors in packages of their own: the
// call's deadline, told apart from a shutdown, and the function that tells
// JetStream the call is still being worked on.
package callctx

import (
	"context"
	"errors"
	"time"
)

// errTimedOut is the cancellation cause of a call's context when the call's
// own deadline passes, told apart from the worker shutting down.
var errTimedOut = errors.New("call deadline exceeded")

// TimedOutMessage is the message of a failed reply for a call whose
// deadline passed before it finished (D37).
const TimedOutMessage = "timed out"

// WithDeadline bounds ctx by a call's deadline; a zero deadline means none.
// TimedOut tells whether ctx ended because of it.
func WithDeadline(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadlineCause(ctx, deadline, errTimedOut)
}

// TimedOut reports whether ctx ended because its call's deadline passed.
func TimedOut(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errTimedOut)
}

// progressKey carries a call's in-progress function in its context.
type progressKey struct{}

// WithProgress returns ctx carrying f, which an executor calls when the
// call made progress (the worker sends an in-progress ack).
func WithProgress(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, progressKey{}, f)
}

// Progress is the in-progress function of ctx's call, or nil.
func Progress(ctx context.Context) func() {
	f, _ := ctx.Value(progressKey{}).(func())
	return f
}
