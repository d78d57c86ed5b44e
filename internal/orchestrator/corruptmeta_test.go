package orchestrator_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/api/apitest"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/testkit"
	"github.com/toolgate/toolgate/wire"
)

// A stream's meta.inf damaged while its server was down (an external
// server, which the orchestrator reaches over TCP and outlives): the server
// skips the stream when it starts again, with a warning of its own, so the
// stream is missing although its messages are on disk. The orchestrator
// creates it again, over those messages: the conversation paused before
// reads back whole, and new ones start.
func TestDamagedStreamMetaOnExternalServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func(listen string) *embedded.Server {
		t.Helper()
		s, err := embedded.StartServer(embedded.ServerConfig{StoreDir: dir, Listen: listen, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	srv := start("127.0.0.1:-1")
	url := srv.ClientURL()
	t.Cleanup(func() { srv.Shutdown() })
	sys := testkit.Test(t, testkit.Options{URL: url, Logger: testLogger(t)})
	b, err := bus.Connect(ctxT(t), bus.ConnConfig{URL: url, Name: "orchestrator", Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	o, err := sys.Orchestrator(ctxT(t), "orchestrator", orchestrator.Config{Bus: b})
	if err != nil {
		t.Fatal(err)
	}
	paused := startPaused(t, o.Orchestrator)
	h := httptest.NewServer(api.Handler(o.Orchestrator, api.Config{}))
	t.Cleanup(h.Close)

	srv.Shutdown()
	meta := filepath.Join(dir, "jetstream", "$G", "streams", bus.StreamConversations, "meta.inf")
	m, err := os.ReadFile(meta)
	if err != nil {
		t.Fatal(err)
	}
	for i := range min(len(m), 16) {
		m[i] ^= 0xff
	}
	if err := os.WriteFile(meta, m, 0o600); err != nil {
		t.Fatal(err)
	}
	srv = start(strings.TrimPrefix(url, "nats://"))

	// Before, it answered 500 until the orchestrator was restarted.
	waitFor(t, "the conversation readable again", func() (bool, string) {
		st, body := apitest.DoJSON(t, "GET", h.URL+"/v1/conversations/"+paused.ID, nil, "")
		return st == http.StatusOK && body["status"] == "paused", fmt.Sprintf("%d %v", st, body)
	})
	c, err := o.Conversation(ctxT(t), paused.ID)
	if err != nil {
		t.Fatal(err)
	}
	if c.Batch == nil || len(c.Batch.Calls) != len(paused.Batch.Calls) {
		t.Fatalf("the paused conversation after its stream came back: %s", describe(c))
	}
	if err := o.Health(ctxT(t)); err != nil {
		t.Errorf("health after the stream came back: %v", err)
	}
	startPaused(t, o.Orchestrator)
}

// A missing stream that cannot be created again (here another stream took
// its subjects) is named by Health, so /healthz answers 503 saying so, and
// is created again once it can be.
func TestMissingStreamNamedUntilRestored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{})
	js := e.connect("operator").JetStream()
	var dlq jetstream.StreamConfig
	for _, sc := range (bus.SetupConfig{}).StreamConfigs() {
		if sc.Name == wire.StreamDLQ {
			dlq = sc
		}
	}
	for attempt := 1; ; attempt++ {
		if err := js.DeleteStream(ctxT(t), wire.StreamDLQ); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatal(err)
		}
		_, err := js.CreateStream(ctxT(t), jetstream.StreamConfig{Name: "SQUATTER", Subjects: dlq.Subjects})
		if err == nil {
			break
		}
		// The orchestrator created it again in between.
		if attempt == 5 {
			t.Fatal(err)
		}
	}
	waitFor(t, "health naming the missing stream", func() (bool, string) {
		err := o.Health(ctxT(t))
		return err != nil && strings.Contains(err.Error(), wire.StreamDLQ+": ") && strings.Contains(err.Error(), "not created again"), fmt.Sprint(err)
	})
	if err := js.DeleteStream(ctxT(t), "SQUATTER"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stream created again", func() (bool, string) {
		_, serr := js.Stream(ctxT(t), wire.StreamDLQ)
		herr := o.Health(ctxT(t))
		return serr == nil && herr == nil, fmt.Sprint(serr, herr)
	})
}
