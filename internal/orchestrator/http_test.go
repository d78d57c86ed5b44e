package orchestrator_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/api"
	"github.com/toolgate/toolgate/internal/api/apitest"
	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/bus/bustest"
	"github.com/toolgate/toolgate/internal/client"
	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/wire"
)

func doJSON(t *testing.T, method, url, token, body string) (int, map[string]any) {
	t.Helper()
	return apitest.DoJSON(t, method, url, apitest.Bearer(token), body)
}

// Events stored together as one message are served one by one, each with
// its own id, and Last-Event-ID resumes in the middle of such a message.
func TestSSEResumesInsideEventBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{})
	srv := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(srv.Close)
	paused := startPaused(t, o)
	var events []wire.Event
	for _, typ := range []string{"probe_a", "probe_b", "probe_c"} {
		events = append(events, wire.Event{ConversationID: paused.ID, Type: typ, Time: time.Now()})
	}
	m, err := bus.EventBatchMessage(events)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.connect("probe").PublishBatch(ctxT(t), []bus.Outgoing{m}); err != nil {
		t.Fatal(err)
	}
	cl := &client.Client{BaseURL: srv.URL}
	read := func(last string) (ids, types []string) {
		t.Helper()
		for ev, err := range cl.Events(ctxT(t), paused.ID, last) {
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(ev.Event, "probe_") {
				continue
			}
			ids, types = append(ids, ev.ID), append(types, ev.Event)
			if ev.Event == "probe_c" {
				return ids, types
			}
		}
		return ids, types
	}
	ids, types := read("")
	seq, _, _ := strings.Cut(ids[0], ".")
	if want := []string{seq, seq + ".1", seq + ".2"}; !slices.Equal(ids, want) || !slices.Equal(types, []string{"probe_a", "probe_b", "probe_c"}) {
		t.Fatalf("ids %v types %v, want ids %v", ids, types, want)
	}
	if _, types := read(ids[0]); !slices.Equal(types, []string{"probe_b", "probe_c"}) {
		t.Errorf("after %s: %v", ids[0], types)
	}
	if _, types := read(ids[1]); !slices.Equal(types, []string{"probe_c"}) {
		t.Errorf("after %s: %v", ids[1], types)
	}
	for _, bad := range []string{"x", "12.x", "12.-1"} {
		status, body := apitest.DoJSON(t, "GET", srv.URL+"/v1/conversations/"+paused.ID+"/events", http.Header{"Last-Event-ID": {bad}}, "")
		if status != http.StatusBadRequest || !strings.Contains(body["error"].(string), "Last-Event-ID") {
			t.Errorf("Last-Event-ID %q: %d %v", bad, status, body)
		}
	}
}

// An event stream's server-side consumer goes with its client: before,
// each closed stream left one for nats.go's 5-minute inactivity threshold.
func TestSSEConsumerDeletedWhenClientGoes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, _ := e.orch(orchestrator.Config{})
	srv := httptest.NewServer(api.Handler(o, api.Config{}))
	t.Cleanup(srv.Close)
	paused := startPaused(t, o)
	probe := e.connect("probe")
	before := bustest.Consumers(t, probe, wire.StreamEvents)
	cl := &client.Client{BaseURL: srv.URL}
	const streams = 3
	for range streams {
		ctx, cancel := context.WithCancel(ctxT(t))
		for _, err := range cl.Events(ctx, paused.ID, "") {
			if err != nil {
				t.Fatal(err)
			}
			break // one event read: the stream's consumer exists
		}
		cancel()
	}
	bustest.Poll(t, bustest.Timeout, "the closed streams' consumers deleted", func() (bool, string) {
		n := bustest.Consumers(t, probe, wire.StreamEvents)
		return n == before, fmt.Sprintf("%d consumers of %s, %d before %d streams", n, wire.StreamEvents, before, streams)
	})
}
