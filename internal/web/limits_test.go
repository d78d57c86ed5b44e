package web_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/web"
)

// serve runs h under cfg on a loopback port until the test ends.
func serve(t *testing.T, h http.Handler, cfg web.ServeConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- web.Serve(ctx, ln, h, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// get sends one keep-alive GET on conn and reads its answer.
func get(t *testing.T, conn net.Conn, br *bufio.Reader, path string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	return resp
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	web.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
})

// A keep-alive connection that sends nothing more is closed by the
// server; before the idle timeout was set it stayed open for good.
func TestServeClosesIdleConnections(t *testing.T) {
	t.Parallel()
	addr := serve(t, ok, web.ServeConfig{IdleTimeout: 50 * time.Millisecond})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	if resp := get(t, conn, br, "/"); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The guard only keeps a broken server from hanging the test.
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	_, err = br.ReadByte()
	var ne net.Error
	if !errors.Is(err, io.EOF) || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("idle connection: read %v, want EOF (closed by the server)", err)
	}
}

// holding answers GET /healthz and GET / at once, and holds a request
// with ?hold= in its handler until release is closed, after saying so on
// entered.
func holding(entered chan<- struct{}, release <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hold") != "" {
			entered <- struct{}{}
			<-release
		}
		web.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
}

// send writes one GET for path on a new connection to addr, from the local
// address from when it is set, and returns the connection and its reader.
func send(t *testing.T, addr, from, path string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn := dial(t, addr, from)
	if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// dial opens a connection to addr from the loopback address from ("" for
// any), closed when the test ends.
func dial(t *testing.T, addr, from string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 10 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// answer reads one answer from br, its status and body.
func answer(t *testing.T, br *bufio.Reader) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}

// closedByServer reports whether the server closed conn: a read ends at
// once with EOF or a reset. The deadline only keeps a broken server from
// hanging the test.
func closedByServer(conn net.Conn) (bool, error) {
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := conn.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, err
	}
	return err != nil, err
}

// While every connection within MaxConns is in a request, a few more are
// kept for /healthz (any other request on them is answered 503 and the
// connection closed); once those are in requests too, a new connection is
// answered 503 at once and closed; once the requests end, new ones are
// served.
func TestServeBoundsConnections(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}, 16), make(chan struct{})
	addr := serve(t, holding(entered, release), web.ServeConfig{MaxConns: 2})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	var held []*bufio.Reader
	for range 2 {
		_, br := send(t, addr, "", "/?hold=1")
		<-entered
		held = append(held, br)
	}
	conn, br := send(t, addr, "", "/")
	if status, body := answer(t, br); status != http.StatusServiceUnavailable || !strings.Contains(body, "too many connections: 3 open, limit 2") {
		t.Fatalf("a request beyond the bound: %d %s", status, body)
	}
	if closed, err := closedByServer(conn); !closed {
		t.Fatalf("refused connection left open: %v", err)
	}
	conn, br = send(t, addr, "", "/healthz")
	if status, body := answer(t, br); status != http.StatusOK {
		t.Fatalf("/healthz beyond the bound: %d %s", status, body)
	}
	if closed, err := closedByServer(conn); !closed {
		t.Fatalf("/healthz's connection beyond the bound left open: %v", err)
	}
	for range web.HealthReserve {
		send(t, addr, "", "/healthz?hold=1")
		<-entered
	}
	conn = dial(t, addr, "")
	if status, body := answer(t, bufio.NewReader(conn)); status != http.StatusServiceUnavailable || !strings.Contains(body, "too many connections") {
		t.Fatalf("a connection beyond the bound and the reserve: %d %s", status, body)
	}
	close(release)
	released = true
	for i, br := range held {
		if status, _ := answer(t, br); status != http.StatusOK {
			t.Fatalf("held request %d: %d", i, status)
		}
	}
	// The held connections are now idle keep-alive ones: a new one takes
	// the place of the oldest.
	_, br = send(t, addr, "", "/")
	if status, body := answer(t, br); status != http.StatusOK {
		t.Fatalf("after the requests ended: %d %s", status, body)
	}
}

// A flood of connections that never send a request, as the attack that
// found this made (300 against a 256-descriptor process, whose bound is
// 64), leaves at most MaxConns of them open and /healthz answered at once;
// before, the silent ones stayed until the header timeout and every
// request beyond the bound was answered 503. The header timeout here is a
// minute, so that only the bound can free the room.
func TestServeSilentConnectionFlood(t *testing.T) {
	t.Parallel()
	const maxConns, flood = 64, 300
	addr := serve(t, ok, web.ServeConfig{MaxConns: maxConns, ReadHeaderTimeout: time.Minute, ReadTimeout: time.Minute})
	var silent []net.Conn
	for range flood {
		silent = append(silent, dial(t, addr, ""))
	}
	start := time.Now()
	conn, br := send(t, addr, "", "/healthz")
	status, body := answer(t, br)
	t.Logf("/healthz after %d silent connections: %d in %v", flood, status, time.Since(start))
	if status != http.StatusOK {
		t.Fatalf("/healthz after %d silent connections: %d %s", flood, status, body)
	}
	conn.Close()
	// Connections are accepted in the order they were made, and the
	// oldest silent one makes room: all but the newest maxConns are closed.
	for i, c := range silent[:flood-maxConns] {
		if closed, err := closedByServer(c); !closed {
			t.Fatalf("silent connection %d of %d still open: %v", i, flood, err)
		}
	}
}

// A connection that sends nothing is closed after ReadHeaderTimeout.
func TestServeClosesSilentConnections(t *testing.T) {
	t.Parallel()
	addr := serve(t, ok, web.ServeConfig{ReadHeaderTimeout: 50 * time.Millisecond, ReadTimeout: time.Minute})
	conn := dial(t, addr, "")
	start := time.Now()
	if closed, err := closedByServer(conn); !closed {
		t.Fatalf("silent connection: %v, want closed by the server", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("silent connection closed after %v, want about 50ms", d)
	}
}

// One client address holds at most MaxConnsPerIP connections: its silent
// ones make room for its new ones, and when all of its are in requests,
// its next is refused while another address is served.
func TestServeBoundsConnectionsPerAddress(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}, 16), make(chan struct{})
	defer close(release)
	addr := serve(t, holding(entered, release), web.ServeConfig{MaxConns: 16, MaxConnsPerIP: 4, ReadHeaderTimeout: time.Minute, ReadTimeout: time.Minute})
	var silent []net.Conn
	for range 10 {
		silent = append(silent, dial(t, addr, "127.0.0.2"))
	}
	_, br := send(t, addr, "127.0.0.2", "/")
	if status, body := answer(t, br); status != http.StatusOK {
		t.Fatalf("a request from an address with silent connections: %d %s", status, body)
	}
	for i, c := range silent[:7] {
		if closed, err := closedByServer(c); !closed {
			t.Fatalf("silent connection %d beyond the address's bound still open: %v", i, err)
		}
	}
	for range 4 {
		send(t, addr, "127.0.0.2", "/?hold=1")
		<-entered
	}
	conn := dial(t, addr, "127.0.0.2")
	if status, body := answer(t, bufio.NewReader(conn)); status != http.StatusServiceUnavailable || !strings.Contains(body, "too many connections from 127.0.0.2: 4 open, limit 4 per address") {
		t.Fatalf("a fifth connection from an address with four in requests: %d %s", status, body)
	}
	_, br = send(t, addr, "127.0.0.3", "/")
	if status, body := answer(t, br); status != http.StatusOK {
		t.Fatalf("another address: %d %s", status, body)
	}
}

// An event stream outlives the write and read timeouts once it calls
// Stream; a plain request is cut off by them.
func TestStreamLiftsTimeouts(t *testing.T) {
	t.Parallel()
	const timeout = 50 * time.Millisecond
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			if err := web.Stream(w); err != nil {
				t.Error(err)
			}
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		// Write well past both timeouts, then end.
		for end := time.Now().Add(4 * timeout); time.Now().Before(end); {
			time.Sleep(timeout / 5)
			if _, err := io.WriteString(w, "x\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "end\n")
	})
	addr := serve(t, h, web.ServeConfig{WriteTimeout: timeout, ReadTimeout: timeout})
	for path, wantEnd := range map[string]bool{"/stream": true, "/plain": false} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := strings.HasSuffix(string(body), "end\n"); got != wantEnd {
			t.Errorf("%s: reached its end %v, want %v (%d bytes)", path, got, wantEnd, len(body))
		}
	}
}

// A writer with no deadlines (a test recorder) streams as it is.
func TestStreamWithoutDeadlines(t *testing.T) {
	t.Parallel()
	if err := web.Stream(httptest.NewRecorder()); err != nil {
		t.Fatalf("Stream on a recorder: %v", err)
	}
}
