package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/orchestrator"
	"github.com/toolgate/toolgate/internal/web"
)

// sseKeepAlive is how often an idle event stream sends a comment, so that
// proxies keep it open and a gone client is noticed.
const sseKeepAlive = 15 * time.Second

// events streams a conversation's events: replayed from the start of its
// subject (or after Last-Event-ID), then live. The event id is the stream
// sequence of its message, followed by ".i" for the i-th event (i > 0) of
// a message holding several (wire.EventBatch), so a client that reconnects
// with Last-Event-ID misses nothing.
func (h *api) events(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !orchestrator.ValidID(id) {
		web.WriteError(w, http.StatusNotFound, fmt.Sprintf("conversation %q not found", id))
		return
	}
	if _, err := h.o.Conversation(r.Context(), id); err != nil {
		h.fail(w, r, err)
		return
	}
	var last eventID
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		var err error
		if last, err = parseEventID(v); err != nil {
			web.WriteError(w, http.StatusBadRequest, fmt.Sprintf("Last-Event-ID %q: %v", v, err))
			return
		}
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		web.WriteError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	ctx := r.Context()
	msgs, stop := h.follow(ctx, id, last)
	defer stop()
	if err := web.Stream(w); err != nil {
		h.fail(w, r, err)
		return
	}

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
		case <-keep.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case m, ok := <-msgs:
			if !ok {
				return
			}
			if _, err := fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", m.id, m.typ, m.data); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}

type sseMsg struct {
	id   eventID
	typ  string
	data []byte
}

// eventID is where an event is in TOOLGATE_EVENTS: its message's stream
// sequence and its place in that message.
type eventID struct {
	seq   uint64
	index int
}

func (e eventID) String() string {
	if e.index == 0 {
		return strconv.FormatUint(e.seq, 10)
	}
	return strconv.FormatUint(e.seq, 10) + "." + strconv.Itoa(e.index)
}

func parseEventID(s string) (eventID, error) {
	seq, idx, dotted := strings.Cut(strings.TrimSpace(s), ".")
	n, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return eventID{}, errors.New("want a stream sequence number, optionally followed by .index")
	}
	id := eventID{seq: n}
	if dotted {
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 {
			return eventID{}, errors.New("want a stream sequence number, optionally followed by .index")
		}
		id.index = i
	}
	return id, nil
}

// follow follows the conversation's events from the event after last (the
// zero eventID: from the start). The channel closes when ctx ends, the
// orchestrator stops or the stream fails; stop releases it and waits for
// its goroutine.
func (h *api) follow(ctx context.Context, id string, last eventID) (<-chan sseMsg, func()) {
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan sseMsg, 16)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer close(out)
		// The message holding the last event is read again, for the
		// events after it in the same message.
		from := uint64(0)
		if last.seq > 0 {
			from = last.seq - 1
		}
		for se, err := range h.o.Events(ctx, id, from) {
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				h.log.WarnContext(ctx, "event stream", slog.String("conversation_id", id), slog.String("error", err.Error()))
				continue
			}
			if last.seq > 0 && se.Seq == last.seq && se.Index <= last.index {
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
			case out <- sseMsg{id: eventID{seq: se.Seq, index: se.Index}, typ: typ, data: data}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, func() {
		cancel()
		<-finished
	}
}
