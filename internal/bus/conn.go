package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolgate/toolgate/wire"
)

// ConnConfig configures a client connection.
type ConnConfig struct {
	// URL of the NATS server(s), comma-separated. Defaults to
	// nats.DefaultURL. Ignored by (*Server).Connect.
	URL string
	// Name identifies the client in server logs and monitoring. Defaults
	// to "toolgate".
	Name string
	// User and Password authenticate against a server with users.
	User     string
	Password string
	// PasswordFile, when set, holds the password (read at connect, a
	// trailing newline dropped); it overrides Password. Unlike a flag or
	// an environment variable, a file keeps the password out of
	// /proc/<pid>/cmdline and /proc/<pid>/environ, which the programs a
	// worker runs can read.
	PasswordFile string
	// CredsFile is a NATS credentials file (JWT + seed); overrides
	// User/Password.
	CredsFile string
	// Role is the role of the user (RoleWorker, RoleApprover, ...): the
	// connection's inboxes use its InboxPrefix, the only reply subjects its
	// user may subscribe to. Empty: NATS's default prefix.
	Role string
	// ContentType for published bodies: ContentTypeMsgpack (default) or
	// ContentTypeJSON.
	ContentType string
	// PublishTimeout bounds the wait for one publish ack. Defaults to 5s.
	PublishTimeout time.Duration
	// PublishRetries is how many times a publish whose ack timed out is
	// sent again with the same Nats-Msg-Id. Defaults to 3; -1 disables.
	PublishRetries int
	// ElectionWait is how long a publish or a log append that no stream
	// took is sent again, when a stream captures its subject: a
	// replicated stream elects a new leader within some 10 seconds of its
	// leader's server going away, and has none meanwhile. Defaults to
	// 15s; -1 disables (it fails at once, as it does when no stream
	// captures the subject).
	ElectionWait time.Duration
	// Logger for connection and consumer errors. nil discards.
	Logger *slog.Logger
}

func (c ConnConfig) withDefaults() ConnConfig {
	if c.URL == "" {
		c.URL = nats.DefaultURL
	}
	if c.Name == "" {
		c.Name = "toolgate"
	}
	if c.ContentType == "" {
		c.ContentType = wire.ContentTypeMsgpack
	}
	if c.PublishTimeout <= 0 {
		c.PublishTimeout = 5 * time.Second
	}
	switch {
	case c.PublishRetries == 0:
		c.PublishRetries = 3
	case c.PublishRetries < 0:
		c.PublishRetries = 0
	}
	switch {
	case c.ElectionWait == 0:
		c.ElectionWait = 15 * time.Second
	case c.ElectionWait < 0:
		c.ElectionWait = 0
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Bus is a connection to NATS JetStream with toolgate's conventions. It is
// safe for concurrent use.
type Bus struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	logger *slog.Logger
	cfg    ConnConfig
	deny   *denyWatch
	// stalls counts pulls of this connection's consumers that the client
	// gave up on after missed heartbeats.
	stalls atomic.Int64
	// drifts counts consumers found changed by another client (drift.go).
	drifts atomic.Int64
	// noCreate holds the streams on which this user was refused making a
	// consumer (bindConsumer).
	noCreate sync.Map
	// callConsumers holds the tools whose call_<tool> consumer this
	// connection has made sure of (EnsureCallConsumer).
	callConsumers sync.Map
	// streams caches handles of streams purged by name (Bus.stream).
	streams sync.Map
	// borrowed: the connection is the caller's (FromConn); Close leaves
	// it open.
	borrowed bool
	// outage gathers the consume loops' errors while the server is away.
	outage pullOutage
	// logs takes the answers to ReadLog's direct gets.
	logs logMux
	// noDirectCalls: the calls stream answers no direct gets of this
	// connection (CallQueued asks its leader only).
	noDirectCalls atomic.Bool
}

// StalledPulls is how many pulls of this connection's consumers the client
// gave up on after missed heartbeats: each may have left a consumer with
// nothing delivered for up to two heartbeats before it pulled again.
func (b *Bus) StalledPulls() int64 { return b.stalls.Load() }

// Connect dials cfg.URL and waits until connected or ctx ends. The
// connection reconnects forever and, if the server is not up yet, keeps
// trying until ctx ends.
func Connect(ctx context.Context, cfg ConnConfig) (*Bus, error) {
	cfg = cfg.withDefaults()
	shown, err := CheckURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	// Until the first connection nothing else is logged: say what is
	// being waited for.
	cfg.Logger.Info("connecting to NATS (retrying until it answers)", slog.String("url", shown), slog.String("client", cfg.Name))
	b, err := connect(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("NATS at %s: %w", shown, err)
	}
	return b, nil
}

// CheckURL checks a comma-separated list of NATS server URLs (a missing
// scheme means nats://) and returns it with any password redacted, for
// logs and errors. A URL the client would only fail to dial, again and
// again, is refused here at once.
func CheckURL(list string) (string, error) {
	var shown []string
	for raw := range strings.SplitSeq(list, ",") {
		raw = strings.TrimSpace(raw)
		s := raw
		if !strings.Contains(s, "://") {
			s = "nats://" + s
		}
		u, err := url.Parse(s)
		if err != nil {
			return "", fmt.Errorf("NATS URL %q: %w", raw, err)
		}
		switch {
		case u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss":
			return "", fmt.Errorf("NATS URL %q: scheme %q: want nats, tls, ws or wss", raw, u.Scheme)
		case u.Hostname() == "":
			return "", fmt.Errorf("NATS URL %q: no host", raw)
		case u.Path != "" && u.Path != "/":
			return "", fmt.Errorf("NATS URL %q: want scheme://host:port, not a path %q", raw, u.Path)
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				return "", fmt.Errorf("NATS URL %q: port %q", raw, p)
			}
		}
		shown = append(shown, u.Redacted())
	}
	return strings.Join(shown, ","), nil
}

// ConnectInProcess opens an in-process connection (no TCP) to a server
// running in this process, such as package embedded's. cfg.URL is ignored.
func ConnectInProcess(ctx context.Context, srv nats.InProcessConnProvider, cfg ConnConfig) (*Bus, error) {
	cfg = cfg.withDefaults()
	return connect(ctx, cfg, nats.InProcessServer(srv))
}

// authOption is the connection's credentials: a creds file, or a user
// with a password given or read from a file; nil for none.
func authOption(cfg ConnConfig) (nats.Option, error) {
	switch {
	case cfg.CredsFile != "":
		return nats.UserCredentials(cfg.CredsFile), nil
	case cfg.User != "":
		password := cfg.Password
		if cfg.PasswordFile != "" {
			b, err := os.ReadFile(cfg.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("password file: %w", err)
			}
			password = strings.TrimRight(string(b), "\r\n")
			if password == "" {
				return nil, fmt.Errorf("password file %s is empty", cfg.PasswordFile)
			}
		}
		return nats.UserInfo(cfg.User, password), nil
	}
	return nil, nil
}

func connect(ctx context.Context, cfg ConnConfig, extra ...nats.Option) (*Bus, error) {
	if _, err := wire.NormalizeContentType(cfg.ContentType); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	logger := cfg.Logger.With(slog.String("component", "bus"), slog.String("client", cfg.Name))
	deny := &denyWatch{}
	var dialErr atomic.Pointer[error]
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{slog.Any("error", err)}
			if sub != nil {
				attrs = append(attrs, slog.String("subject", sub.Subject))
			}
			if errors.Is(err, nats.ErrPermissionViolation) {
				logger.Error("nats permission violation", attrs...)
				deny.violation(err)
				return
			}
			logger.Warn("nats async error", attrs...)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected", slog.Any("error", err))
			}
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			// ErrNoServers only says that a round of the pool failed; the
			// dial error before it says why.
			if err != nil && !errors.Is(err, nats.ErrNoServers) {
				dialErr.Store(&err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("nats reconnected", slog.String("url", nc.ConnectedUrlRedacted()))
		}),
	}
	auth, err := authOption(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if auth != nil {
		opts = append(opts, auth)
	}
	if cfg.Role != "" {
		opts = append(opts, nats.CustomInboxPrefix(InboxPrefix(cfg.Role)))
	}
	opts = append(opts, extra...)

	// A first attempt without retries learns why a server does not answer;
	// the retrying connection after it reports only reconnect errors.
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		first := err
		dialErr.Store(&first)
		logger.Warn("NATS not answering; retrying until it does", slog.Any("error", err))
		nc, err = nats.Connect(cfg.URL, append(opts, nats.RetryOnFailedConnect(true))...)
	}
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", cfg.Name, err)
	}
	if err := waitConnected(ctx, nc); err != nil {
		nc.Close()
		if last := dialErr.Load(); last != nil && errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("no server answered: %w (last error: %v)", err, *last)
		}
		return nil, fmt.Errorf("connect %s: %w", cfg.Name, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("connect %s: jetstream: %w", cfg.Name, err)
	}
	return &Bus{nc: nc, js: js, logger: logger, cfg: cfg, deny: deny}, nil
}

func waitConnected(ctx context.Context, nc *nats.Conn) error {
	ch := nc.StatusChanged(nats.CONNECTED, nats.CLOSED)
	defer nc.RemoveStatusListener(ch)
	for {
		switch nc.Status() {
		case nats.CONNECTED:
			return nil
		case nats.CLOSED:
			return errors.New("connection closed")
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if err := nc.LastError(); err != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
			}
			return ctx.Err()
		}
	}
}

// Conn is the underlying NATS connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream is the underlying JetStream context.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Logger is the bus's logger.
func (b *Bus) Logger() *slog.Logger { return b.logger }

// Close waits up to 2s for pending asynchronous publishes and closes
// the connection. Stop consumers first.
func (b *Bus) Close() {
	select {
	case <-b.js.PublishAsyncComplete():
	case <-time.After(2 * time.Second):
	}
	b.js.CleanupPublisher()
	b.endOutage()
	b.logs.close()
	if !b.borrowed {
		b.nc.Close()
	}
}

// EnvPassword is the environment variable toolgate's commands take a NATS
// password from.
const EnvPassword = "TOOLGATE_NATS_PASSWORD"

// TakeEnvPassword returns the password in EnvPassword and removes the
// variable from the process's environment, so that no program the process
// starts inherits it. (/proc/<pid>/environ still shows the environment the
// process was started with: ConnConfig.PasswordFile keeps it out of there.)
func TakeEnvPassword() string {
	p := os.Getenv(EnvPassword)
	_ = os.Unsetenv(EnvPassword)
	return p
}
