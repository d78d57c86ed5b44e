package api_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/conversation"
)

// blockingEngine answers a conversation's read only when its request ends.
type blockingEngine struct{ api.Engine }

func (blockingEngine) Conversation(ctx context.Context, id string) (*conversation.State, error) {
	<-ctx.Done()
	return nil, fmt.Errorf("read conversation %s: %w", id, ctx.Err())
}

// A client that leaves before its answer is not an error of the server:
// logged at debug level, never as level=ERROR … context canceled.
func TestClientLeavingIsNotAnError(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	h := api.Handler(blockingEngine{}, api.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/conversations/c1", nil)
	h.ServeHTTP(httptest.NewRecorder(), req)
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("a client leaving logged an error:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "level=DEBUG") || !strings.Contains(logs.String(), "client left") {
		t.Errorf("log = %q, want a debug line saying the client left", logs.String())
	}
}
