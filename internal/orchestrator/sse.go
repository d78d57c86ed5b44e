package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/web"

	"github.com/toolgate/toolgate/internal/bus"
)

// sseKeepAlive is how often an idle event stream sends a comment, so that
// proxies keep it open and a gone client is noticed.
const sseKeepAlive = 15 * time.Second

// events streams a conversation's events: replayed from the start of its
// subject (or after Last-Event-ID), then live. The event id is the stream
// sequence, so a client that reconnects with Last-Event-ID misses nothing.
func (h *api) events(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validID(id) {
		web.WriteError(w, http.StatusNotFound, fmt.Sprintf("conversation %q not found", id))
		return
	}
	if _, err := h.o.Conversation(r.Context(), id); err != nil {
		h.fail(w, r, err)
		return
	}
	var after uint64
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(last), 10, 64)
		if err != nil {
			web.WriteError(w, http.StatusBadRequest, fmt.Sprintf("Last-Event-ID %q: want a stream sequence number", last))
			return
		}
		after = n
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		web.WriteError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	ctx := r.Context()
	msgs, stop, err := h.o.followEvents(ctx, id, after)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer stop()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": stream of conversation "+id+"\n\n")
	flusher.Flush()

	keep := time.NewTicker(sseKeepAlive)
	defer keep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.o.stopping:
			return
		case <-keep.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case m, ok := <-msgs:
			if !ok {
				return
			}
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", m.seq, m.typ, m.data); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}

type sseMsg struct {
	seq  uint64
	typ  string
	data []byte
}

// followEvents follows toolgate.event.<id> from the sequence after `after`
// (0: from the start). The channel closes when ctx ends or the stream
// fails; stop releases it and waits for its goroutine.
func (o *Orchestrator) followEvents(ctx context.Context, id string, after uint64) (<-chan sseMsg, func(), error) {
	if _, err := bus.EventSubject(id); err != nil {
		return nil, nil, fmt.Errorf("conversation %s: %w", id, ErrNotFound)
	}
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan sseMsg, 16)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer close(out)
		for se, err := range o.bus.Events(ctx, id, after) {
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				o.log.WarnContext(ctx, "event stream", slog.String("conversation_id", id), slog.String("error", err.Error()))
				continue
			}
			data, err := json.Marshal(se.Event)
			if err != nil {
				continue
			}
			typ := se.Event.Type
			if typ == "" || strings.ContainsAny(typ, "\r\n") {
				typ = "message"
			}
			select {
			case out <- sseMsg{seq: se.Seq, typ: typ, data: data}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, func() {
		cancel()
		<-finished
	}, nil
}
