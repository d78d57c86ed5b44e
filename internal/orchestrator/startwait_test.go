package orchestrator_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

// Start does not wait on what is due. The second orchestrator's user may
// not read the conversations' logs (direct gets of TOOLGATE_CONVERSATIONS),
// so every read of its first reconcile pass gets no answer until the read's
// own bound: Start returns, and the API answers starts and health, while
// that pass has not yet given up on a single conversation; it then names
// each as it gives up.
func TestStartDoesNotWaitOnReadsThatHang(t *testing.T) {
	t.Parallel()
	blind := bus.User{Name: "blind", Password: "blind-pw", Permissions: bus.Permissions{
		Publish: []string{"toolgate.>", "$JS.ACK.>", "$KV.>", "$JS.API.INFO", "$JS.API.STREAM.>", "$JS.API.CONSUMER.>",
			"$JS.API.DIRECT.GET.KV_>", "$JS.API.DIRECT.GET." + wire.StreamEvents + ".>"},
	}}
	admin := bus.User{Name: "admin", Password: "admin-pw"}
	e := envWith(t, t.TempDir(), embedded.ServerConfig{Users: []bus.User{admin, blind}})
	connect := func(u bus.User) *bus.Bus {
		return bustest.ConnectConfig(t, e.srv(), bus.ConnConfig{Name: u.Name, User: u.Name, Password: u.Password, Logger: testLogger(t)})
	}
	o1, stop1 := e.orch(orchestrator.Config{Bus: connect(admin)})
	for range 3 {
		startPaused(t, o1)
	}
	stop1()

	o2, _ := e.orch(orchestrator.Config{Bus: connect(blind)})
	if got := o2.Stats().ReconcileErrors.Load(); got != 0 {
		t.Fatalf("Start returned after its first pass gave up on %d conversations: it waited on them", got)
	}
	hs := httptest.NewServer(api.Handler(o2, api.Config{}))
	t.Cleanup(hs.Close)
	if status, body := doJSON(t, "GET", hs.URL+"/healthz", "", ""); status != http.StatusOK {
		t.Errorf("/healthz while the first pass hangs: %d %v", status, body)
	}
	if status, body := doJSON(t, "POST", hs.URL+"/v1/runs", "", `{"prompt":"hello"}`); status != http.StatusAccepted {
		t.Errorf("a start while the first pass hangs: %d %v", status, body)
	}
	if got := o2.Stats().ReconcileErrors.Load(); got != 0 {
		t.Fatalf("the first pass gave up on %d conversations before the API was used: the reads did not hang", got)
	}
	// Each read is bounded (10 s without an answer): the list of last
	// records, then the first conversation.
	waitFor(t, "the first pass to give up on a conversation it cannot read", func() (bool, string) {
		got := o2.Stats().ReconcileErrors.Load()
		return got >= 1, fmt.Sprint(got)
	})
}
