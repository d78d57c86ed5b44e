// Package web holds what toolgate's HTTP servers share: serving until a
// context ends with a bounded graceful shutdown, and JSON answers with
// `{"error": "..."}` for errors. Standard library only.
package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// ServeConfig tunes Serve.
type ServeConfig struct {
	// ShutdownTimeout bounds the wait for requests in progress once ctx
	// ends; then the server is closed. Defaults to 5s.
	ShutdownTimeout time.Duration
	// Logger receives the server's own errors (bad TLS, handler panics).
	// Nil: net/http's default logger.
	Logger *slog.Logger
}

// Serve serves h on ln until ctx ends, then shuts down. Requests see ctx as
// their base context, so long streams (SSE) end when it does instead of
// holding the shutdown. It returns nil after a clean shutdown, the serve
// error if serving stopped by itself, or the shutdown error.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, cfg ServeConfig) error {
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	if cfg.Logger != nil {
		srv.ErrorLog = slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		_ = srv.Close()
		err = fmt.Errorf("http: shutdown: %w", err)
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = fmt.Errorf("http: %w", serr)
	}
	return err
}

// WriteJSON answers v as JSON with status; the answer is never cached.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteError answers {"error": msg} with status.
func WriteError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, map[string]string{"error": msg})
}
