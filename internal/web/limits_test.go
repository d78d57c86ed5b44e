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

// Connections beyond MaxConns are answered 503 naming the limit and
// closed; once one closes, a new one is served.
func TestServeBoundsConnections(t *testing.T) {
	t.Parallel()
	addr := serve(t, ok, web.ServeConfig{MaxConns: 2})
	var held []net.Conn
	for range 2 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if resp := get(t, conn, bufio.NewReader(conn), "/"); resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: status %d", len(held), resp.StatusCode)
		}
		held = append(held, conn)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp := get(t, conn, br, "/")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "too many connections: 3 open, limit 2") {
		t.Fatalf("third connection: %d %s", resp.StatusCode, body)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("refused connection left open: %v", err)
	}
	conn.Close()
	held[0].Close()
	// The server sees the closes in its own time.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		resp := get(t, c, bufio.NewReader(c), "/")
		c.Close()
		if resp.StatusCode == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no connection served after two closed: %d", resp.StatusCode)
		}
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
