package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
)

// clientLeft reports whether err is only the request's end: its client
// went away (closed the connection, gave up waiting) before the answer.
// That is the client's doing, not the server's fault, and is logged at
// debug level, not as an error; nobody is left to answer.
func (h *api) clientLeft(r *http.Request, err error) bool {
	if r.Context().Err() == nil || !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	h.log.DebugContext(r.Context(), "client left before its answer", slog.String("method", r.Method), slog.String("path", r.URL.Path))
	return true
}
