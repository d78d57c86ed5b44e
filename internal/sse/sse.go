// Package sse reads a text/event-stream body, as the orchestrator's API
// writes a conversation's events; package client and the toolgate command
// follow them with it.
package sse

import (
	"bufio"
	"fmt"
	"iter"
	"net/http"
	"strings"
)

// Event is one Server-Sent Event.
type Event struct {
	ID    string
	Event string
	Data  string
}

// Read yields the events of a text/event-stream body until it ends; a read
// error ends the sequence after yielding it.
func Read(r *bufio.Reader) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		var ev Event
		var data []string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				if line == "" {
					return
				}
				yield(Event{}, fmt.Errorf("event stream: %w", err))
				return
			}
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "":
				if len(data) > 0 || ev.Event != "" {
					ev.Data = strings.Join(data, "\n")
					if !yield(ev, nil) {
						return
					}
				}
				ev, data = Event{}, nil
			case strings.HasPrefix(line, ":"):
			default:
				field, value, _ := strings.Cut(line, ":")
				value = strings.TrimPrefix(value, " ")
				switch field {
				case "id":
					ev.ID = value
				case "event":
					ev.Event = value
				case "data":
					data = append(data, value)
				}
			}
		}
	}
}

// Follow sends req, a GET of an event stream, and yields its events until
// ctx (req's context) ends or the server closes the stream. An answer other
// than 200 is yielded as refused(status); an error after ctx ended is not
// yielded.
func Follow(hc *http.Client, req *http.Request, refused func(status int) error) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		ctx := req.Context()
		req.Header.Set("Accept", "text/event-stream")
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				yield(Event{}, err)
			}
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			yield(Event{}, refused(resp.StatusCode))
			return
		}
		for ev, err := range Read(bufio.NewReader(resp.Body)) {
			if err != nil && ctx.Err() != nil {
				return
			}
			if !yield(ev, err) || err != nil {
				return
			}
		}
	}
}
