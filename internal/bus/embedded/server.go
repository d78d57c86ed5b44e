// Package embedded runs toolgate's NATS server inside the process: a
// nats-server with JetStream on a file store, optionally a node of a
// cluster, with the users of toolgate's roles. It is apart from package bus
// so that only the programs that embed a server (the orchestrator, tests)
// link nats-server; workers and approvers connect to one.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolgate/toolgate/internal/bus"
)

// ServerConfig configures an embedded NATS server with JetStream.
type ServerConfig struct {
	// StoreDir holds the JetStream file store and the lock file that keeps
	// a second server off the same directory. Required.
	StoreDir string
	// Listen is the client address host:port. Port -1 picks a free port
	// (tests). Defaults to "127.0.0.1:4222".
	Listen string
	// NoListen serves only in-process connections.
	NoListen bool
	// ServerName is the stable server name JetStream keys its state by.
	// Defaults to "toolgate".
	ServerName string
	// SyncAlways makes the file store fsync every write. By default it
	// fsyncs every two minutes: a process crash loses nothing, a machine
	// crash can lose the last writes.
	SyncAlways bool
	// Users, when set, require clients to authenticate and restrict each
	// user to its permissions (see bus.RolePermissions). Empty: no auth.
	Users []bus.User
	// Cluster, when set, makes the server a node of a NATS cluster with
	// clustered JetStream (streams and buckets then take
	// bus.SetupConfig.Replicas). Every node needs its own ServerName and
	// StoreDir. nil: a single server.
	Cluster *ClusterConfig
	// Logger receives the server's log. nil discards it.
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept clients.
	// Defaults to 10s.
	ReadyTimeout time.Duration
}

// ClusterConfig joins the embedded server to a cluster.
type ClusterConfig struct {
	// Name of the cluster, the same on every node. Required.
	Name string
	// Listen is the route address host:port other nodes connect to. Port
	// -1 picks a free port (see Server.ClusterURL). Required.
	Listen string
	// Routes are the route URLs of the nodes to join
	// (nats-route://host:port); a node's own URL may be listed and is
	// ignored, so every node can share one list.
	Routes []string
	// User and Password, when set, are required of (and sent to) the other
	// nodes' routes.
	User     string
	Password string
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:4222"
	}
	if c.ServerName == "" {
		c.ServerName = "toolgate"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ReadyTimeout <= 0 {
		c.ReadyTimeout = 10 * time.Second
	}
	return c
}

func (c ServerConfig) validate() error {
	if c.StoreDir == "" {
		return errors.New("store dir is required")
	}
	for i, u := range c.Users {
		if u.Name == "" {
			return fmt.Errorf("user %d has no name", i)
		}
	}
	if cl := c.Cluster; cl != nil {
		if err := bus.ValidateToken("cluster name", cl.Name); err != nil {
			return err
		}
		if _, _, err := splitListen(cl.Listen); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		for _, r := range cl.Routes {
			if u, err := url.Parse(r); err != nil || u.Host == "" {
				return fmt.Errorf("cluster route %q: want nats-route://host:port", r)
			}
		}
	}
	return nil
}

// Server is an embedded NATS server with JetStream.
type Server struct {
	ns     *server.Server
	lock   *os.File
	logger *slog.Logger
}

// ErrStoreDirLocked is returned when another server holds the store dir.
var ErrStoreDirLocked = errors.New("store dir is in use by another server")

// StartServer starts an embedded server and waits until it accepts clients.
// It holds an exclusive lock on cfg.StoreDir until Shutdown.
func StartServer(cfg ServerConfig) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	host, port, err := splitListen(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	if !cfg.NoListen {
		if err := checkFree(host, port); err != nil {
			return nil, fmt.Errorf("start server: %w", err)
		}
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o750); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	lock, err := lockDir(cfg.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	opts := &server.Options{
		ServerName:             cfg.ServerName,
		Host:                   host,
		Port:                   port,
		DontListen:             cfg.NoListen,
		JetStream:              true,
		StoreDir:               cfg.StoreDir,
		SyncAlways:             cfg.SyncAlways,
		NoSigs:                 true,
		DisableJetStreamBanner: true,
	}
	if cl := cfg.Cluster; cl != nil {
		chost, cport, _ := splitListen(cl.Listen)
		opts.Cluster = server.ClusterOpts{
			Name: cl.Name, Host: chost, Port: cport,
			Username: cl.User, Password: cl.Password,
		}
		for _, r := range cl.Routes {
			u, _ := url.Parse(r)
			if cl.User != "" && u.User == nil {
				u.User = url.UserPassword(cl.User, cl.Password)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	for _, u := range cfg.Users {
		opts.Users = append(opts.Users, &server.User{
			Username:    u.Name,
			Password:    u.Password,
			Permissions: serverPermissions(u.Permissions),
		})
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("start server: %w", err)
	}
	logger := cfg.Logger.With(slog.String("component", "nats-server"))
	debug := logger.Enabled(context.Background(), slog.LevelDebug)
	ns.SetLoggerV2(&slogAdapter{l: logger}, debug, false, false)
	go ns.Start()
	if !ns.ReadyForConnections(cfg.ReadyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		lock.Close()
		return nil, fmt.Errorf("start server: not ready for connections after %s", cfg.ReadyTimeout)
	}
	return &Server{ns: ns, lock: lock, logger: cfg.Logger}, nil
}

// checkFree fails at once when the client port is taken: nats-server
// would only log it and never become ready.
func checkFree(host string, port int) error {
	if port <= 0 {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return ln.Close()
}

func splitListen(listen string) (string, int, error) {
	host, p, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("listen address %q: bad port", listen)
	}
	return host, port, nil
}

func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "toolgate.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock store dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrStoreDirLocked, dir)
		}
		return nil, fmt.Errorf("lock store dir %s: %w", dir, err)
	}
	return f, nil
}

// ClientURL is the URL other processes connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// ClusterURL is the route URL other nodes list in ClusterConfig.Routes; ""
// without a cluster.
func (s *Server) ClusterURL() string {
	addr := s.ns.ClusterAddr()
	if addr == nil {
		return ""
	}
	return "nats-route://" + addr.String()
}

// WriteError returns the write error a stream of the server keeps, if any.
// A write that fails below the server's storage limit (the disk filled up
// first, so JetStream's own limit did not refuse it) leaves the stream with
// its error: nats-server answers none of its publishes after that, and
// clears the error only when it restarts. Its health check is the one place
// that says so.
func (s *Server) WriteError() error {
	h := s.ns.Healthz(&server.HealthzOptions{Details: true})
	for _, e := range h.Errors {
		if strings.Contains(e.Error, "write error") {
			return errors.New(e.Error)
		}
	}
	return nil
}

// NATSServer exposes the underlying server, for monitoring and tests.
func (s *Server) NATSServer() *server.Server { return s.ns }

// Connect opens an in-process connection to the server (no TCP).
// cfg.URL is ignored.
func (s *Server) Connect(ctx context.Context, cfg bus.ConnConfig) (*bus.Bus, error) {
	return bus.ConnectInProcess(ctx, s.ns, cfg)
}

// Shutdown stops the server, waits for it to finish and releases the
// store dir. It is safe to call twice.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	if s.lock != nil {
		s.lock.Close() // closing releases the flock
		s.lock = nil
	}
}

func serverPermissions(p bus.Permissions) *server.Permissions {
	if p.Publish == nil && p.Subscribe == nil {
		return nil
	}
	sp := &server.Permissions{}
	if p.Publish != nil {
		sp.Publish = &server.SubjectPermission{Allow: p.Publish}
		if len(p.Publish) == 0 {
			sp.Publish.Deny = []string{">"}
		}
	}
	if p.Subscribe != nil {
		sp.Subscribe = &server.SubjectPermission{Allow: p.Subscribe}
		if len(p.Subscribe) == 0 {
			sp.Subscribe.Deny = []string{">"}
		}
	}
	return sp
}

// slogAdapter is nats-server's Logger over slog.
type slogAdapter struct{ l *slog.Logger }

func (a *slogAdapter) Noticef(format string, v ...any) { a.l.Info(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *slogAdapter) Tracef(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
