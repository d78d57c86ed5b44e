package orchestrator_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// On a store that runs out of room (a real 8 MiB tmpfs, so JetStream sizes
// its limit from the disk as it does in production), starts are refused
// with 503 naming the cause and /healthz says so; once room is back (here:
// conversations purged), both recover without a restart. Before, starts
// answered 500 "internal error" and /healthz stayed ok.
func TestStorageFullRefusesStartsAndRecovers(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	srv := bustest.StartServer(t, embedded.ServerConfig{StoreDir: filepath.Join(dir, "store"), NoListen: true, Logger: testLogger(t)})
	e := &env{t: t, srv: srv, dir: dir}
	bustest.Setup(t, e.connect("setup"))
	o, _ := e.orch(orchestrator.Config{})
	hs := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(hs.Close)

	prompt := `{"prompt":"` + strings.Repeat("p", api.MaxPromptBytes-16) + `"}`
	var status int
	var body map[string]any
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatalf("100 starts of %d bytes on an 8 MiB store all taken", len(prompt))
		}
		if status, body = doJSON(t, "POST", hs.URL+"/v1/runs", "", prompt); status != http.StatusAccepted {
			break
		}
	}
	if msg, _ := body["error"].(string); status != http.StatusServiceUnavailable || !strings.Contains(msg, "storage full") {
		t.Fatalf("start on a full store: %d %v, want 503 storage full", status, body)
	}
	if status, body := doJSON(t, "GET", hs.URL+"/healthz", "", ""); status != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(body["error"]), "storage full") {
		t.Errorf("/healthz on a full store: %d %v", status, body)
	}

	st, err := e.connect("operator").JetStream().Stream(ctxT(t), bus.StreamConversations)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	bustest.Poll(t, bustest.Timeout, "/healthz ok again", func() (bool, string) {
		status, body := doJSON(t, "GET", hs.URL+"/healthz", "", "")
		return status == http.StatusOK, fmt.Sprint(status, body)
	})
	if status, body := doJSON(t, "POST", hs.URL+"/v1/runs", "", `{"prompt":"hello again"}`); status != http.StatusAccepted {
		t.Errorf("start once room is back: %d %v", status, body)
	}
}

// A disk that fills below the server's storage limit (here: a file takes
// the rest of the tmpfs after the server sized its limit from it) makes
// nats-server keep the stream's write error and answer none of its
// publishes until it restarts. A start then answers 503 naming the cause
// (before: a 500 "internal error" after the write's timeout), later starts
// are refused at once, and /healthz says so and that a restart is needed,
// even once room is back, since the server still keeps the error.
func TestDiskFullBelowTheLimitIsSaid(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (needs root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	srv := bustest.StartServer(t, embedded.ServerConfig{StoreDir: filepath.Join(dir, "store"), NoListen: true, Logger: testLogger(t)})
	e := &env{t: t, srv: srv, dir: dir}
	bustest.Setup(t, e.connect("setup"))
	o, _ := e.orch(orchestrator.Config{ServerWriteError: srv.WriteError})
	hs := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(hs.Close)
	if status, body := doJSON(t, "POST", hs.URL+"/v1/runs", "", `{"prompt":"before"}`); status != http.StatusAccepted {
		t.Fatalf("start with room: %d %v", status, body)
	}

	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			break
		}
	}
	f.Close()

	prompt := `{"prompt":"` + strings.Repeat("p", 64<<10) + `"}`
	status, body := doJSON(t, "POST", hs.URL+"/v1/runs", "", prompt)
	if msg := fmt.Sprint(body["error"]); status != http.StatusServiceUnavailable || !strings.Contains(msg, "no space left on device") || !strings.Contains(msg, "restart") {
		t.Fatalf("start on a full disk below the limit: %d %v, want 503 naming the cause and the restart", status, body)
	}
	// The next start does not try to write: it asks the server first.
	writes := o.Stats().StateWrites.Load()
	if status, body := doJSON(t, "POST", hs.URL+"/v1/runs", "", `{"prompt":"again"}`); status != http.StatusServiceUnavailable {
		t.Errorf("second start on a full disk: %d %v, want 503", status, body)
	}
	if got := o.Stats().StateWrites.Load(); got != writes {
		t.Errorf("the second start tried %d writes, want none", got-writes)
	}
	if status, body := doJSON(t, "GET", hs.URL+"/healthz", "", ""); status != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(body["error"]), "write error") {
		t.Errorf("/healthz on a full disk below the limit: %d %v", status, body)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if status, body := doJSON(t, "GET", hs.URL+"/healthz", "", ""); status != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(body["error"]), "restart") {
		t.Errorf("/healthz once room is back: %d %v, want 503 saying the server needs a restart", status, body)
	}
}
