package bus

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// ErrPermissionDenied is returned when the server refused a publish or a
// JetStream API call for lack of permission. Without it such a call would
// only time out: the server reports the violation asynchronously and never
// answers the request.
var ErrPermissionDenied = errors.New("permission denied")

var violationRe = regexp.MustCompile(`(?i)publish to "([^"]+)"`)

// denyWatch lets in-flight requests fail as soon as the connection reports
// a publish permission violation on their subject.
type denyWatch struct {
	mu      sync.Mutex
	next    int
	waiters map[int]denyWaiter
}

type denyWaiter struct {
	match  func(subject string) bool
	cancel context.CancelCauseFunc
}

// guard returns a context cancelled with a permission error when a
// violation on a subject that match accepts is reported; release it after
// the call.
func (w *denyWatch) guard(ctx context.Context, match func(string) bool) (context.Context, func()) {
	gctx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	if w.waiters == nil {
		w.waiters = map[int]denyWaiter{}
	}
	id := w.next
	w.next++
	w.waiters[id] = denyWaiter{match: match, cancel: cancel}
	w.mu.Unlock()
	return gctx, func() {
		w.mu.Lock()
		delete(w.waiters, id)
		w.mu.Unlock()
		cancel(nil)
	}
}

func (w *denyWatch) violation(err error) {
	m := violationRe.FindStringSubmatch(err.Error())
	if m == nil {
		return
	}
	subject := m[1]
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wt := range w.waiters {
		if wt.match(subject) {
			wt.cancel(fmt.Errorf("%w: publish to %s: %w", ErrPermissionDenied, subject, err))
		}
	}
}

// denied returns the permission error that cancelled gctx, if any.
func denied(gctx context.Context) error {
	if cause := context.Cause(gctx); cause != nil && errors.Is(cause, ErrPermissionDenied) {
		return cause
	}
	return nil
}

func exactSubject(s string) func(string) bool { return func(v string) bool { return v == s } }

// jsAPIFor matches JetStream API subjects that name stream.
func jsAPIFor(stream string) func(string) bool {
	return func(v string) bool {
		return strings.HasPrefix(v, "$JS.API.") && (stream == "" || strings.Contains(v, "."+stream))
	}
}
