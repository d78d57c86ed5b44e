package orchestrator_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/conversation"
	"github.com/toolgate/toolgate/internal/orchestrator"
)

// logBuffer is a log sink the orchestrator's goroutines may share.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A conversation with a record that cannot be read costs only itself: the
// restarted orchestrator's reconcile logs and counts it, and goes on with
// the others (here it publishes again the calls of a paused one); reading
// it gives the record's error, not "not found".
func TestReconcileGoesOnAroundAnUnreadableConversation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o1, stop1 := e.orch(orchestrator.Config{})
	bad, good := startPaused(t, o1), startPaused(t, o1)
	stop1()
	if _, err := e.connect("vandal").JetStream().Publish(ctxT(t), bus.ConversationSubject(bad.ID), []byte{0xc1, 0xff, 0x00}); err != nil {
		t.Fatal(err)
	}

	var logs logBuffer
	o2, _ := e.orch(orchestrator.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	waitFor(t, "a pass over both conversations", func() (bool, string) {
		return o2.Stats().ReconcileErrors.Load() >= 1 && o2.Stats().Published.Load() >= int64(len(good.Batch.Calls)),
			logs.String()
	})
	if !strings.Contains(logs.String(), "conversation_id="+bad.ID) {
		t.Errorf("the unreadable conversation is not named in the log:\n%s", logs.String())
	}
	var corrupt *orchestrator.CorruptError
	if _, err := o2.Conversation(ctxT(t), bad.ID); !errors.As(err, &corrupt) || corrupt.ConversationID != bad.ID {
		t.Errorf("reading the unreadable conversation: %v, want a CorruptError naming it", err)
	}
	// Over HTTP it says so, rather than "internal error" or 404.
	srv := httptest.NewServer(api.Handler(o2, api.Config{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/conversations/" + bad.ID)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(string(body), "is corrupt: its record") {
		t.Errorf("GET of the unreadable conversation: %d %s", resp.StatusCode, body)
	}
	if c, err := o2.Conversation(ctxT(t), good.ID); err != nil || c.Status != conversation.StatusPaused {
		t.Errorf("the other conversation: %v %v", c, err)
	}
}
