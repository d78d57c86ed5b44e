package bustest

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
)

// CutProxy passes TCP between NATS clients and a server. Armed with a
// pattern, it mutes the connection on which a client sends it: nothing
// the server says reaches that client any more, as on a network that
// failed right after a request left. Whether the request itself reaches
// the server is the Arm's choice. Cut then drops the muted connection and
// the client reconnects through the proxy, unharmed.
type CutProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	pattern []byte
	forward bool // the request that sends pattern reaches the server
	fired   chan struct{}
	muted   []net.Conn
	// all are every connection the proxy made, closed at cleanup: one
	// left open would keep its copiers, and the cleanup, waiting.
	all []net.Conn
}

// NewCutProxy listens on a loopback port and passes what comes to
// target (a server's client URL, or host:port); it is closed at cleanup.
func NewCutProxy(t testing.TB, target string) *CutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{ln: ln, target: strings.TrimPrefix(target, "nats://")}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.all {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.all = append(p.all, c, s)
			p.mu.Unlock()
			var muted sync.Once
			mute := make(chan struct{})
			wg.Go(func() { p.toServer(c, s, func() { muted.Do(func() { close(mute) }) }) })
			wg.Go(func() { p.toClient(s, c, mute) })
		}
	})
	return p
}

// URL is the proxy's, for bus.ConnConfig.URL.
func (p *CutProxy) URL() string { return "nats://" + p.ln.Addr().String() }

// Arm mutes the next connection that sends pattern; forward says whether
// the write that holds it reaches the server. The returned channel is
// closed when that happens.
func (p *CutProxy) Arm(pattern string, forward bool) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pattern, p.forward, p.fired = []byte(pattern), forward, make(chan struct{})
	return p.fired
}

// Cut drops the muted connections.
func (p *CutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.muted {
		c.Close()
	}
	p.muted = nil
}

func (p *CutProxy) toServer(c, s net.Conn, mute func()) {
	defer s.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			forward := true
			p.mu.Lock()
			if p.pattern != nil && bytes.Contains(buf[:n], p.pattern) {
				mute()
				forward = p.forward
				p.pattern = nil
				p.muted = append(p.muted, c, s)
				close(p.fired)
			}
			p.mu.Unlock()
			if forward {
				if _, err := s.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *CutProxy) toClient(s, c net.Conn, mute <-chan struct{}) {
	defer c.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		select {
		case <-mute:
			// Whatever the server says is lost; keep reading so that it
			// is not held up writing.
			if err != nil {
				return
			}
			continue
		default:
		}
		if n > 0 {
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
