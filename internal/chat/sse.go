package chat

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// SSE writes one response's Server-Sent Events, each flushed as written.
type SSE struct {
	// mu orders the events and the keep-alive comments.
	mu sync.Mutex
	w  http.ResponseWriter
	f  http.Flusher
}

// NewSSE writes to w, whose headers the adapter has sent.
func NewSSE(w http.ResponseWriter) *SSE {
	f, _ := w.(http.Flusher)
	return &SSE{w: w, f: f}
}

// Data sends v as JSON in one data line; a v that does not marshal is
// not sent.
func (s *SSE) Data(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.Write("data: " + string(data) + "\n\n")
}

// Event sends v as JSON in one data line under the SSE id id, which a
// client that reconnects gives back as Last-Event-ID; a v that does not
// marshal is not sent.
func (s *SSE) Event(id string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.Write("id: " + id + "\ndata: " + string(data) + "\n\n")
}

// Write sends text as it is.
func (s *SSE) Write(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprint(s.w, text)
	if s.f != nil {
		s.f.Flush()
	}
}

// KeepAlive sends an SSE comment every d (the clients read only data
// lines) until the returned stop, which waits for it, is called.
func (s *SSE) KeepAlive(d time.Duration) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				s.Write(": keep-alive\n\n")
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
