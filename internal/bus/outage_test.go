package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/bus/embedded"
	"github.com/toolgate/toolgate/wire"
)

// logLines is a log sink safe to read while written.
type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A NATS restart under consumers of several tools logs one warning for the
// outage, not one per tool and pull, and says when the server answers
// again.
func TestServerRestartWarnsOncePerOutage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := bustest.StartServer(t, embedded.ServerConfig{StoreDir: dir})
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	var logs logLines
	b, err := bus.Connect(ctxT(t), bus.ConnConfig{URL: srv.ClientURL(), Name: "restart",
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	bustest.Setup(t, b)
	var subs []*bus.Subscription
	for _, tool := range []string{"a", "b", "c", "d"} {
		s, err := b.ConsumeCalls(ctxT(t), tool, bus.ConsumeConfig{AckWait: 3 * time.Second, PullExpiry: time.Second},
			bus.HandlerFunc[wire.CallRequest](func(context.Context, *bus.Delivery[wire.CallRequest]) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	// Stopped while the restarted server runs (its cleanup comes first).
	defer func() {
		for _, s := range subs {
			if err := s.Stop(ctxT(t)); err != nil {
				t.Errorf("stop: %v", err)
			}
		}
	}()

	srv.Shutdown()
	bustest.Poll(t, 30*time.Second, "pull errors while the server is away", func() (bool, string) {
		n := logs.count("consumers cannot pull") + logs.count("msg=\"consume error\"")
		return n >= 2, fmt.Sprintf("%d pull errors logged", n)
	})
	bustest.StartServer(t, embedded.ServerConfig{StoreDir: dir, Listen: u.Host})
	bustest.Poll(t, 30*time.Second, "the end of the outage", func() (bool, string) {
		return logs.count("consumers pull again") == 1, logs.String()
	})
	if n := logs.count("level=WARN msg=\"consumers cannot pull"); n != 1 {
		t.Errorf("%d warnings for one outage, want 1:\n%s", n, logs.String())
	}
	if n := logs.count("level=WARN msg=\"consume error\""); n != 0 {
		t.Errorf("%d pull errors logged as warnings:\n%s", n, logs.String())
	}
}
