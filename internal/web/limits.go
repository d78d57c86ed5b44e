package web

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// Defaults of the connection bounds beyond DefaultMaxConns.
const (
	// DefaultReadHeaderTimeout bounds the wait for a request's headers,
	// from the connection's start for its first request: a client that
	// connects and says nothing gives its descriptor back within it.
	DefaultReadHeaderTimeout = 5 * time.Second
	// HealthReserve is how many connections beyond MaxConns are kept for
	// GET /healthz when every connection within it is in a request.
	HealthReserve = 8
)

// connLimiter counts the connections of one server from the moment they
// are accepted, not from their first request: connections that never send
// one take descriptors all the same.
//
// A connection is busy while a request on it is in a handler; only those
// hold their place. Beyond the bound (of all connections, or of those of
// one client address) the oldest connection not busy (one that has sent no
// request yet, or a keep-alive one between requests) is closed to make
// room; when every one is busy, a few connections more are kept for
// GET /healthz, and past those a new connection is answered 503 at once
// and closed. So a flood of silent connections neither takes every
// descriptor nor keeps anyone out, and the liveness check is answered
// while the server is full of real work.
type connLimiter struct {
	max, perIP, reserve int
	// perLoopback is the bound of one loopback address, where every local
	// client has the same one.
	perLoopback int

	mu     sync.Mutex
	seq    uint64
	conns  map[*limitedConn]struct{}
	normal int // open connections within max
	over   int // open connections of the reserve
	byIP   map[netip.Addr]int
}

func newConnLimiter(max, perIP, perLoopback, reserve int) *connLimiter {
	return &connLimiter{
		max: max, perIP: perIP, perLoopback: perLoopback, reserve: reserve,
		conns: make(map[*limitedConn]struct{}), byIP: make(map[netip.Addr]int),
	}
}

// limitedConn is a connection the limiter counts; Close gives its place
// back.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	ip   netip.Addr
	seq  uint64
	over bool // of the reserve: serves GET /healthz only

	// Guarded by l.mu.
	busy   int
	closed bool
}

func (c *limitedConn) Close() error {
	c.l.release(c)
	return c.Conn.Close()
}

func (l *connLimiter) release(c *limitedConn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	delete(l.conns, c)
	if c.over {
		l.over--
	} else {
		l.normal--
	}
	if l.byIP[c.ip]--; l.byIP[c.ip] <= 0 {
		delete(l.byIP, c.ip)
	}
}

// enter and leave mark a request in a handler.
func (c *limitedConn) enter() {
	c.l.mu.Lock()
	c.busy++
	c.l.mu.Unlock()
}

func (c *limitedConn) leave() {
	c.l.mu.Lock()
	c.busy--
	c.l.mu.Unlock()
}

// oldestIdle is the oldest open connection not in a request among those
// match accepts, or nil. l.mu is held.
func (l *connLimiter) oldestIdle(match func(*limitedConn) bool) *limitedConn {
	var old *limitedConn
	for c := range l.conns {
		if c.busy == 0 && match(c) && (old == nil || c.seq < old.seq) {
			old = c
		}
	}
	return old
}

// admit counts nc in, or says why not. The connections it returns in
// evict lost their place to it: the caller closes them.
func (l *connLimiter) admit(nc net.Conn) (c *limitedConn, evict []*limitedConn, refused string) {
	ip := remoteIP(nc.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	drop := func(v *limitedConn) {
		// Counted out now, so that the place is free for nc; its Close
		// finds it gone.
		v.closed = true
		delete(l.conns, v)
		if v.over {
			l.over--
		} else {
			l.normal--
		}
		if l.byIP[v.ip]--; l.byIP[v.ip] <= 0 {
			delete(l.byIP, v.ip)
		}
		evict = append(evict, v)
	}
	open := l.normal + l.over
	perIP := l.perIP
	if ip.IsLoopback() {
		perIP = l.perLoopback
	}
	if l.byIP[ip] >= perIP {
		v := l.oldestIdle(func(c *limitedConn) bool { return c.ip == ip })
		if v == nil {
			return nil, nil, fmt.Sprintf("too many connections from %s: %d open, limit %d per address", ip, l.byIP[ip], perIP)
		}
		drop(v)
	}
	over := false
	if l.normal >= l.max {
		if v := l.oldestIdle(func(c *limitedConn) bool { return !c.over }); v != nil {
			drop(v)
		} else if l.over < l.reserve {
			over = true
		} else if v := l.oldestIdle(func(c *limitedConn) bool { return c.over }); v != nil {
			drop(v)
			over = true
		} else {
			return nil, evict, fmt.Sprintf("too many connections: %d open, limit %d", open+1, l.max)
		}
	}
	l.seq++
	c = &limitedConn{Conn: nc, l: l, ip: ip, seq: l.seq, over: over}
	l.conns[c] = struct{}{}
	if over {
		l.over++
	} else {
		l.normal++
	}
	l.byIP[ip]++
	return c, evict, ""
}

func remoteIP(a net.Addr) netip.Addr {
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// limitListener hands the server only the connections its limiter admits.
type limitListener struct {
	net.Listener
	l *connLimiter
}

func (ln *limitListener) Accept() (net.Conn, error) {
	for {
		nc, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c, evict, refused := ln.l.admit(nc)
		for _, v := range evict {
			_ = v.Conn.Close()
		}
		if c != nil {
			return c, nil
		}
		refuse(nc, refused)
	}
}

// refuse answers a connection that gets no place 503 with why, without
// reading from it, and closes it. A new connection's send buffer is empty,
// so the write does not wait; the deadline is for a peer that is gone.
func refuse(nc net.Conn, why string) {
	body := `{"error":` + strconv.Quote(why) + "}\n"
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(nc, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = nc.Close()
}

type connKey struct{}

// limited marks the requests on a limiter's connections as busy and lets
// those on the reserve ask only GET /healthz.
func (l *connLimiter) limited(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(*limitedConn)
		if c == nil {
			h.ServeHTTP(w, r)
			return
		}
		c.enter()
		defer c.leave()
		if c.over {
			w.Header().Set("Connection", "close")
			if r.Method != http.MethodGet || r.URL.Path != "/healthz" {
				w.Header().Set("Retry-After", "1")
				l.mu.Lock()
				open := l.normal + l.over
				l.mu.Unlock()
				WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("too many connections: %d open, limit %d", open, l.max))
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// connContext hands a request its connection's place, for limited.
func connContext(ctx context.Context, nc net.Conn) context.Context {
	if c, ok := nc.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, c)
	}
	return ctx
}
