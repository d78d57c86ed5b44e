// Package web holds what toolgate's HTTP servers share: serving until a
// context ends with a bounded graceful shutdown, timeouts and a bound on
// connections, the checks of a loopback listener, and JSON answers with
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

// Defaults of ServeConfig.
const (
	DefaultReadTimeout  = 30 * time.Second
	DefaultWriteTimeout = 60 * time.Second
	DefaultIdleTimeout  = 60 * time.Second
)

// ServeConfig tunes Serve.
type ServeConfig struct {
	// ShutdownTimeout bounds the wait for requests in progress once ctx
	// ends; then the server is closed. Defaults to 5s.
	ShutdownTimeout time.Duration
	// Logger receives the server's own errors (bad TLS, handler panics).
	// Nil: net/http's default logger.
	Logger *slog.Logger
	// ReadTimeout bounds reading a request, headers and body; WriteTimeout
	// bounds answering it (event streams lift both: see Stream);
	// IdleTimeout closes a keep-alive connection that sends nothing.
	// Zero: the Default… values.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// ReadHeaderTimeout bounds the wait for a request's headers, counted
	// for a new connection from its start, so one that sends nothing is
	// closed within it. Zero: DefaultReadHeaderTimeout (at most
	// ReadTimeout).
	ReadHeaderTimeout time.Duration
	// MaxConns bounds the open connections, counted from their accept so
	// that idle or slow clients cannot take every file descriptor the
	// process (and an embedded NATS server in it) needs. Beyond it the
	// oldest connection not in a request is closed to make room; when
	// every one is in a request, HealthReserve more are kept for
	// GET /healthz (any other request on them is answered 503), and past
	// those a new connection is answered 503 and closed.
	// Zero: DefaultMaxConns().
	MaxConns int
	// MaxConnsPerIP bounds the open connections of one client address
	// the same way (the oldest not in a request makes room), so that one
	// client cannot hold them all. Zero: half of MaxConns (at least 1),
	// and no bound of its own for a loopback address, which every local
	// client shares.
	MaxConnsPerIP int
}

// Serve serves h on ln until ctx ends, then shuts down. Requests see ctx as
// their base context, so long streams (SSE) end when it does instead of
// holding the shutdown. It returns nil after a clean shutdown, the serve
// error if serving stopped by itself, or the shutdown error. On a loopback
// listener, requests must pass LocalOnly.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, cfg ServeConfig) error {
	if loopbackAddr(ln.Addr()) {
		h = LocalOnly(h)
	}
	srv, limiter := newServer(ctx, h, cfg)
	ln = &limitListener{Listener: ln, l: limiter}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 5 * time.Second
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

// newServer is the http.Server Serve runs: h behind the connection bound,
// with cfg's timeouts, requests under ctx. It serves only connections
// accepted through the limiter's listener.
func newServer(ctx context.Context, h http.Handler, cfg ServeConfig) (*http.Server, *connLimiter) {
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns()
	}
	perIP, perLoopback := cfg.MaxConnsPerIP, cfg.MaxConnsPerIP
	if perIP <= 0 {
		perIP, perLoopback = max(cfg.MaxConns/2, 1), cfg.MaxConns+HealthReserve
	}
	limiter := newConnLimiter(cfg.MaxConns, perIP, perLoopback, HealthReserve)
	return &http.Server{
		Handler:           limiter.limited(h),
		ReadHeaderTimeout: min(cfg.ReadHeaderTimeout, cfg.ReadTimeout),
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext:       connContext,
	}, limiter
}

// Stream lifts the read and write deadlines of the connection of a request
// that streams (Server-Sent Events) for as long as the client stays: the
// server's timeouts are for requests that end. A stream that stops
// reading is noticed by its keep-alive writes failing once the kernel's
// buffers are full, and ends with its context.
//
// A writer that has no deadlines to lift (a recorder, a wrapper that does
// not unwrap) is no error: it has no server timeouts either.
func Stream(w http.ResponseWriter) error {
	rc := http.NewResponseController(w)
	for _, set := range []func(time.Time) error{rc.SetWriteDeadline, rc.SetReadDeadline} {
		if err := set(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return fmt.Errorf("stream: %w", err)
		}
	}
	return nil
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
