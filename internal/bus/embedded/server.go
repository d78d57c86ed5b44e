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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/wire"
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
	// MinFreeBytes is the free space on the store's filesystem below
	// which the store is short of room: a store that failed a write for
	// want of room is reopened only once its filesystem has this much
	// free, so that it does not fail again at once. Defaults to 64 MiB.
	MinFreeBytes uint64
	// StoreCheckInterval is how often the server looks for a stream that
	// failed a write for want of room, to reopen the store once there is
	// room again. Defaults to 5s.
	StoreCheckInterval time.Duration
}

// DefaultMinFreeBytes is ServerConfig.MinFreeBytes's default.
const DefaultMinFreeBytes = 64 << 20

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
	if c.MinFreeBytes == 0 {
		c.MinFreeBytes = DefaultMinFreeBytes
	}
	if c.StoreCheckInterval <= 0 {
		c.StoreCheckInterval = 5 * time.Second
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
		if err := wire.ValidateToken("cluster name", cl.Name); err != nil {
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
	cfg    ServerConfig
	// js is the JetStream configuration the server started with; a store
	// is reopened with the same.
	js server.JetStreamConfig

	// mu orders reopening the store with Shutdown.
	mu   sync.Mutex
	down bool
	// disabled: JetStream was shut down to reopen the store and is not
	// enabled again yet.
	disabled atomic.Bool
	reopens  atomic.Int64
	quit     chan struct{}
	watching sync.WaitGroup
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
	s := &Server{ns: ns, lock: lock, logger: cfg.Logger, cfg: cfg, quit: make(chan struct{}),
		js: server.JetStreamConfig{StoreDir: cfg.StoreDir, SyncAlways: cfg.SyncAlways, Strict: true, CompressOK: true}}
	if cfg.Cluster == nil {
		s.watching.Add(1)
		go s.watchStore()
	}
	return s, nil
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

// lockBusyFor is how long a held lock of the store dir is tried again
// before it is taken for another server's. A server of this process that
// just shut down can still seem to hold it: a process being started
// (fork, then exec) holds a copy of every descriptor, the lock's among
// them, until it execs, and the lock is released only then.
const lockBusyFor = time.Second

func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, "toolgate.lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock store dir: %w", err)
	}
	deadline := time.Now().Add(lockBusyFor)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock store dir %s: %w", dir, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("%w: %s", ErrStoreDirLocked, dir)
		}
		time.Sleep(10 * time.Millisecond)
	}
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

// WriteError returns the write error a stream of the server keeps, if any,
// worded to say what clears it. A write that fails below the server's
// storage limit (the disk filled up first, so JetStream's own limit did not
// refuse it) leaves the stream's file store with its error: nats-server
// answers none of its publishes after that, and nothing in it clears the
// error but opening the stream again. Its health check is the one place
// that says so. A single server reopens its store once the disk has room
// again (see watchStore).
func (s *Server) WriteError() error {
	if s.disabled.Load() {
		return errors.New("JetStream is shut down to reopen the store and could not be enabled again yet; tried again at every check")
	}
	werr := s.keptWriteError()
	if werr == "" {
		return nil
	}
	if s.cfg.Cluster != nil || !outOfSpace(werr) {
		return fmt.Errorf("%s; nats-server keeps this error until it restarts: restart it", werr)
	}
	free, _, err := s.StoreSpace()
	if err != nil {
		return fmt.Errorf("%s; free disk space: the store is reopened once its filesystem has %s free (%v)", werr, sizeText(s.cfg.MinFreeBytes), err)
	}
	return fmt.Errorf("%s; free disk space: the store is reopened once its filesystem has %s free (now %s)", werr, sizeText(s.cfg.MinFreeBytes), sizeText(free))
}

// keptWriteError is the first write error a stream keeps, as the server's
// health check words it; "" if none.
func (s *Server) keptWriteError() string {
	h := s.ns.Healthz(&server.HealthzOptions{Details: true})
	for _, e := range h.Errors {
		if strings.Contains(e.Error, "write error") {
			return e.Error
		}
	}
	return ""
}

// outOfSpace tells a kept write error that a disk without room caused
// (nats-server's own test, isOutOfSpaceErr, is the same).
func outOfSpace(werr string) bool { return strings.Contains(werr, "no space left") }

// StoreSpace returns the free (to an unprivileged writer) and total bytes
// of the filesystem holding the store.
func (s *Server) StoreSpace() (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.cfg.StoreDir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", s.cfg.StoreDir, err)
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

// StoreReopens counts the times the store was reopened after a write
// failed for want of room.
func (s *Server) StoreReopens() int64 { return s.reopens.Load() }

// watchStore reopens the store of a single server once a stream kept a
// write error for want of room and the disk has room again. nats-server
// keeps such an error in the stream's file store for good (publishes get
// no answer, even once room is back); shutting JetStream down and enabling
// it again opens every stream afresh from its files, as a restart would,
// while clients stay connected: durable consumers are read back from
// disk, and the clients' pulls and ordered consumers start again after
// their missed heartbeats. Nothing acknowledged is lost: the failed write
// was never acknowledged, and what the stream held is read back.
//
// A node of a cluster is left alone: there nats-server shuts JetStream
// down itself when a disk is full, and the other nodes serve the
// replicated streams until it restarts.
func (s *Server) watchStore() {
	defer s.watching.Done()
	t := time.NewTicker(s.cfg.StoreCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		s.checkStore()
	}
}

// checkStore reopens the store if a stream keeps a write error for want
// of room (or an earlier reopening could not enable JetStream again) and
// the disk has MinFreeBytes free.
func (s *Server) checkStore() {
	werr := ""
	if !s.disabled.Load() {
		if werr = s.keptWriteError(); werr == "" || !outOfSpace(werr) {
			return
		}
	}
	free, _, err := s.StoreSpace()
	if err != nil {
		s.logger.Warn("store: cannot tell its free space", slog.String("error", err.Error()))
		return
	}
	if free < s.cfg.MinFreeBytes {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return
	}
	if !s.disabled.Load() {
		s.logger.Warn("store: reopening it, since a stream failed a write for want of room and the disk has room again",
			slog.String("error", werr), slog.String("free", sizeText(free)))
		// Said before the streams go: while they are closing, the
		// server's health check no longer sees their write errors.
		s.disabled.Store(true)
		if err := s.ns.ShutdownJetStream(); err != nil {
			s.logger.Error("store: shut JetStream down to reopen the store", slog.String("error", err.Error()))
			return
		}
	}
	// EnableJetStream joins "jetstream" to the directory, as at start, and
	// sizes the storage limit from the disk again.
	cfg := s.js
	if err := s.ns.EnableJetStream(&cfg); err != nil {
		// As nats-server does when a reload cannot enable it: what was
		// set up of it is shut down, so that the next try starts clean.
		_ = s.ns.ShutdownJetStream()
		s.logger.Error("store: enable JetStream again (tried again at the next check)", slog.String("error", err.Error()))
		return
	}
	s.reopens.Add(1)
	s.disabled.Store(false)
	s.logger.Info("store: reopened; streams take writes again")
}

// sizeText writes n bytes in MiB (or bytes when small).
func sizeText(n uint64) string {
	if n < 1<<20 {
		return strconv.FormatUint(n, 10) + " B"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
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
	s.mu.Lock()
	if !s.down {
		s.down = true
		close(s.quit)
	}
	s.mu.Unlock()
	s.watching.Wait()
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
		sp.Publish = &server.SubjectPermission{Allow: p.Publish, Deny: p.PublishDeny}
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
